"""The guard as a vLLM v1 logits processor: batch-level, sparse, mask-only (docs/vllm.md).

vLLM (v1 engine) builds one :class:`GuardLogitsProcessor` per engine and calls, before every forward
pass, :meth:`~GuardLogitsProcessor.update_state` (requests joined, left or moved within the batch) and then
:meth:`~GuardLogitsProcessor.apply` on the ``(num_requests, vocab_size)`` logits. Only requests whose
``SamplingParams.extra_args`` carry a ``"guardrail"`` entry have state here; with none in the batch,
``apply`` returns the logits untouched, so an engine with the plugin installed but unused pays nothing.
The guarded requests are the rows of one :class:`~guardrail.guard.batch.BatchGuard`: ``apply`` advances them
all by the ids vLLM appended and masks the whole batch in one index write (tens of microseconds per step at
256 rows on the host, ``bench/batch_guard.py``; the index tensors are rebuilt only when a row's mask changed).

Per-request arguments (``extra_args={"guardrail": {...}}``; on vLLM's HTTP server ``vllm_xargs``, whose values
are scalars or lists, so there the object is sent JSON-encoded: ``"vllm_xargs": {"guardrail": "{...}"}``)::

    wordlists      bundled list names ("en", "de") to guard against             default []
    banned_terms   extra terms (a list named "request")                         default []
    bans           {"<position>": [token ids]}: position bans, counted from     default {}
                   the request's first generated token
    always_banned  [token ids] masked at every position (its former name,      default []
                   ``banned_ids``, is still read)
    resume_tokens  the last N prompt tokens are already completion text: the   default 0
                   matcher starts after them (a resubmission after a rollback)
    mask           "completing" (mask-only guard, the default) or "bans" (only
                   the lists' always-banned ids, ``always_banned`` and ``bans``: the
                   rollback driver, :mod:`guardrail.engines.vllm.driver`, catches
                   hits itself and passes its artefact's always-banned ids here)
    obfuscation    the level of the lists that set none: LEVEL or LEVEL+markup     default masked+markup
                   (docs/matching.md); the default is DEFAULT_OBFUSCATION, the
                   level of every other path (docs/vllm.md)

What it guarantees (``mask="completing"``): at every step the ids that would complete a banned term from
the request's current matcher state are masked (the mask primitive: what :meth:`MaskSession.mask_ids` masks),
and EOS too when ending the text there would complete a ``word`` term. That stops every term that a single
token completes, in any tokenization — but it cannot take back text: a term whose beginning is already out
is steered around, not removed (the model may glue or misspell it, "sorryfor"), a text cut by
``max_tokens`` may end on a pending ``word`` term, and a row whose every candidate is masked still yields
a token. Such after-the-fact matches are recorded in the row (``MaskRow.missed``). The full
guarantee (no term in any chunk, rollback to the term's start) needs the driver.

Registered under the entry-point group ``vllm.logits_processors`` (pyproject.toml), which vLLM loads into
every engine of the environment: ``vllm serve MODEL`` users enable nothing, they pass the arguments.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import numpy as np
import torch
from cachetools import LRUCache
from vllm import SamplingParams
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor, MoveDirectionality

from guardrail.engines.mask_write import MaskWriter
from guardrail.engines.vllm.args import EXTRA_ARGS_KEY, GuardArgs, parse_guard_args
from guardrail.guard.batch import BatchGuard, MaskRow, MaskTable, always_banned_ids
from guardrail.matching.combined import ArtefactLike
from guardrail.matching.obfuscation import Obfuscation
from guardrail.matching.vocab import TokenVocab

if TYPE_CHECKING:
    from vllm.config import VllmConfig

    from guardrail.matching.cache import ArtefactCache

__all__ = ["EXTRA_ARGS_KEY", "GuardArgs", "GuardLogitsProcessor", "load_vocab", "parse_guard_args"]

#: Compiled artefacts kept per processor (one per distinct list selection; a compile costs ~1 s on CPU).
ARTEFACT_LIMIT = 32
#: Always-banned arrays kept per processor (one per artefact and request ids: rows that share one share its
#: layout in the batch's index).
ALWAYS_BANNED_LIMIT = 256


def load_vocab(tokenizer_path: str) -> tuple[TokenVocab, frozenset[int]]:
    """The bytes table of the tokenizer in ``tokenizer_path`` and the ids that end the text (the tokenizer's
    EOS plus ``generation_config.json``'s ``eos_token_id``, as the embedded engine uses).

    The driver and the processor both build it this way, so their artefacts share one vocab fingerprint.

    Raises:
        OSError: no tokenizer there. ValueError: unsupported tokenizer family.
    """
    from transformers import AutoTokenizer, GenerationConfig

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
    try:
        eos = GenerationConfig.from_pretrained(tokenizer_path).eos_token_id
    except OSError:  # no generation_config.json
        eos = None
    eos_ids = set() if eos is None else {eos} if isinstance(eos, int) else set(eos)
    vocab = TokenVocab.from_tokenizer(tokenizer, eos_ids=eos_ids)
    return vocab, frozenset(vocab.eos_ids | eos_ids)


class GuardLogitsProcessor(LogitsProcessor):
    """vLLM v1 logits processor masking, per guarded request, what its guard session says.

    Args:
        vllm_config: the engine's config (the tokenizer path and the logits width are read from it).
        device: where the logits live; the mask index is built on the CPU and copied there.
        is_pin_memory: whether pinned host memory may be used for that copy.

    The tokenizer's bytes table is built on the first guarded request (about 0.1 s for SmolLM2's 49,152
    tokens), and artefacts are compiled once per list selection through
    :class:`~guardrail.matching.cache.ArtefactCache` (memory, then guardrail's disk cache).
    """

    def __init__(self, vllm_config: VllmConfig, device: torch.device, is_pin_memory: bool):
        model_config = vllm_config.model_config
        self._tokenizer_path = model_config.tokenizer
        self._num_logits = model_config.get_vocab_size()
        self._batch = BatchGuard()
        self._writer = MaskWriter(device, pin_memory=is_pin_memory)
        self._vocab: TokenVocab | None = None
        self._eos_ids: frozenset[int] = frozenset()
        # guarded by _lock; a MaskTable holds its artefact
        self._tables: LRUCache[tuple[tuple[str, ...], tuple[str, ...], Obfuscation], MaskTable] = LRUCache(
            ARTEFACT_LIMIT)
        self._always: LRUCache[tuple[int, tuple[int, ...]], tuple[ArtefactLike | None, np.ndarray]] = LRUCache(
            ALWAYS_BANNED_LIMIT)
        self._cache: ArtefactCache | None = None
        self._lock = threading.Lock()

    # -- the vLLM interface -------------------------------------------------------------------------------
    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        """Reject a malformed ``extra_args["guardrail"]`` at admission (see :func:`parse_guard_args`).

        Raises:
            ValueError: naming the field; vLLM turns it into HTTP 400 on its server.
        """
        parse_guard_args(sampling_params.extra_args)

    def is_argmax_invariant(self) -> bool:
        """False: masking changes which id is the argmax."""
        return False

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        """Track guarded requests joining, leaving and moving within the persistent batch, in the order
        vLLM documents: removes, then adds, then moves."""
        if not batch_update:
            return
        batch = self._batch
        for index in batch_update.removed:
            batch.remove(index)
        for index, params, prompt_ids, output_ids in batch_update.added:
            row = self._new_row(params, prompt_ids, output_ids)
            if row is None:
                batch.remove(index)  # an unguarded request took the place of a guarded one
            else:
                batch.add(index, row)
        for source, target, direction in batch_update.moved:
            batch.move(source, target, swap=direction == MoveDirectionality.SWAP)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """Mask every guarded row's ids in place, in one write (:meth:`BatchGuard.step`).

        Args:
            logits: ``float (num_requests, vocab_size)``, one row per request in batch order.

        Returns:
            ``logits`` itself: untouched when no request in the batch is guarded.
        """
        batch = self._batch
        if not len(batch):
            return logits
        return self._writer.write(logits, batch.step())  # unchanged rows keep their tensors, on the device too

    # -- per-request state ----------------------------------------------------------------------------------
    def _new_row(self, params: SamplingParams, prompt_ids: list[int] | None, output_ids: list[int]) -> MaskRow | None:
        args = parse_guard_args(params.extra_args)
        if args is None:
            return None
        bans = {p: np.array(sorted(set(ids)), dtype=np.int64) for p, ids in args.bans.items() if ids}
        table = self._table(args) if args.guards_terms else None
        artefact = table.artefact if table is not None else None
        always = self._always_banned(artefact, args.always_banned)
        if table is None or args.mask != "completing":
            return MaskRow(None, output_ids, always, bans=bans)
        resumed = (prompt_ids or [])[len(prompt_ids or []) - args.resume_tokens:] if args.resume_tokens else []
        return MaskRow(table, output_ids, always, bans=bans, prefix=resumed)

    def _always_banned(self, artefact: ArtefactLike | None, extra: tuple[int, ...]) -> np.ndarray:
        """The ids a row masks at every position: the artefact's always-banned ids, the padded logits ids and
        the request's own; one shared array per (artefact, request ids)."""
        key = (id(artefact), extra)
        found = self._always.get(key)
        if found is None or found[0] is not artefact:
            vocab = self._load_vocab()
            found = self._always[key] = (artefact, always_banned_ids(artefact, len(vocab), self._num_logits, extra))
        return found[1]

    def _load_vocab(self) -> TokenVocab:
        if self._vocab is None:
            self._vocab, self._eos_ids = load_vocab(self._tokenizer_path)
        return self._vocab

    def _table(self, args: GuardArgs) -> MaskTable:
        """The :class:`MaskTable` of the request's lists (compiled once per selection, kept in an LRU)."""
        key = (args.wordlists, tuple(sorted(set(args.banned_terms))), args.obfuscation)
        with self._lock:
            found = self._tables.get(key)  # a hit becomes the most recently used
            if found is not None:
                return found
        from guardrail.matching.cache import ArtefactCache
        from guardrail.models import cache_dir

        vocab = self._load_vocab()
        if self._cache is None:
            self._cache = ArtefactCache(cache_dir=cache_dir())
        artefact, _ = self._cache.get(vocab, args.selected_wordlists())
        table = MaskTable.of(artefact, self._eos_ids)
        with self._lock:
            self._tables[key] = table
        return table
