"""The streaming rollback decoder: the model never emits a banned term, and the guard costs microseconds.

This module is one engine driving a :class:`~guardrail.guard.session.GuardSession` (which holds every guard
decision: bans, matcher, rollback budget, stop strings, release); it keeps only the KV cache, the kept logits,
the processors and the loop. One step (docs/design.md, "The decode step")::

    logits of position p (kept from the forward pass that produced them)
      -> processors (logit_bias, repetition penalty, bad words, suppress)       sampling.build_processors
      -> session.mask_ids(): always-banned ids and the bans of position p    -inf, in place (sampling.BanMask)
      -> the JSON grammar after the kept tokens (response_format only), masked first only before top-k,
         top-p or min-p                                                     -inf, in place (guardrail.grammar)
      -> warpers (temperature, top-k, top-p, min-p), then the watermark        sampling.build_warpers
      -> pick (argmax or seeded draw)                                          sampling.TokenPicker
         with a grammar not masked first: the forced token, or the pick if the grammar takes it, else
         mask and pick again                                                  GrammarState.pick
      -> only when the request asked for logprobs: the pick's raw logprob and top-k    Generation._pick_logprobs
         (log_softmax of the logits of p before any processor or ban, computed once per position)
      -> driver.accept(token), then driver.apply(step, token, generation) (driver.judge in two halves, so
         that the batched engine runs every row's guard between all picks and all verdicts: PICKED and
         JUDGED): every pick, including the re-pick after a rollback
         (guardrail.guard.driver.DecodeDriver, the loop end every engine shares: before each pick it asks
         stop_reason() — cancel, deadline — and its finish() ends the text; the session's verdict is applied
         through Generation's handler methods)
           on_rollback -> crop the KV cache to where the term began, drop later kept logits, pick again there
           on_keep     -> one forward pass for the logits of p + 1 (the session released what became final)
           on_finish   -> driver.finish(reason): the last text and the Finish event

:class:`Generation` holds one request's state and loop; :class:`StreamingDecoder` runs one at a time on its own
KV cache, and the batched engine (:mod:`guardrail.engines.transformers.batched`) composes one per row.

Rollback costs no forward pass: the raw logits of every position a rollback can still reach (those not yet
released) are kept, and the processors only read the prefix, which a rollback to ``p`` leaves as it was.
The KV cache is cropped (:mod:`guardrail.engines.transformers.kv_cache`), or rebuilt when a sliding-window
layer cannot crop.

Speculative decoding (:mod:`guardrail.engines.drafting`): a kept token is fed together with up to ``k``
tokens drafted by prompt lookup, and the pass returns the logits of every fed position. The next picks run
through the same steps above; a pick equal to the next draft costs no pass (its column is in the cache,
its logits are known), the first that differs cuts the cache back. Every token still goes through
``session.accept`` in order, so a drafted token that is banned is never picked, and one that completes a
term rolls back as usual.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Generator, Iterator, Sequence
from typing import Protocol, cast

import torch

from guardrail.engines.drafting import (
    ACCEPTANCE_RECOVERY,
    ACCEPTANCE_SMOOTHING,
    INITIAL_ACCEPTANCE,
    Drafter,
    SpeculativeConfig,
    draft_width,
)
from guardrail.engines.transformers.kv_cache import KVCache, has_sliding_layers
from guardrail.engines.transformers.sampling import (
    BanMask,
    BatchBanMask,
    TokenPicker,
    build_processors,
    build_warpers,
)
from guardrail.grammar.matcher import GrammarState
from guardrail.guard.driver import DecodeDriver
from guardrail.guard.events import Event, FinishReason
from guardrail.guard.logprobs import PickLogprobs
from guardrail.guard.session import GuardSession
from guardrail.guard.verdict import FINISH, KEEP, VerdictHandler
from guardrail.matching.combined import ArtefactLike
from guardrail.matching.vocab import TokenVocab
from guardrail.params import SamplingParams

#: Extra ``top_logprobs`` candidates taken from the vocab, for the guard to leave some out and still have ``k``.
ALTERNATIVES_MARGIN = 32
#: Tokens before ``max_tokens`` from which a structured answer is checked for the room to close it
#: (:meth:`~guardrail.grammar.matcher.GrammarState.close_within`): its closing path is shorter than this.
CLOSING_HORIZON = 64


def generation_eos_ids(model) -> set[int]:
    """EOS ids named by ``model.generation_config`` (an int or a list), as a set."""
    config = getattr(model, "generation_config", None)
    eos = getattr(config, "eos_token_id", None) if config is not None else None
    if eos is None:
        return set()
    return {int(eos)} if isinstance(eos, int) else {int(e) for e in eos}


class StreamingDecoder:
    """Decode with a banned-term guard; one per process (holds the model, no per-request state).

    Args:
        model: a transformers causal LM in eval mode.
        tokenizer: its tokenizer (kept for callers; the decoder itself reads ``vocab``).
        vocab: the exact bytes of every token id (``TokenVocab.from_tokenizer``).
        retry_bans: after a rollback, also ban the tokens that would begin the same term at least as deep
            (:meth:`TokenMatcher.retry_bans`); ``False`` bans only the term's first token (benchmark ablation).
        record_past: let sliding-window caches crop past their window
            (see :mod:`guardrail.engines.transformers.kv_cache`);
            ``False`` forces the re-prefill fallback on such models (tests and benchmarks use it).
        speculative: drafting and verification (:mod:`guardrail.engines.drafting`); ``num_tokens=0`` turns
            it off. Off for models with sliding-window layers (a rejected draft past the window would cost a
            re-prefill).
        grammar_check_first: with a ``response_format``, check the pick against the grammar and mask only on a
            refusal (:meth:`~guardrail.grammar.matcher.GrammarState.pick`; the same tokens for greedy decoding,
            the same distribution for sampling); ``False`` masks every position first (the reference of the
            equality tests and of bench/grammar.py). Requests with top-k, top-p or min-p mask first either way.

    Example:
        >>> decoder = StreamingDecoder(model, tokenizer, vocab)
        >>> for event in decoder.stream(prompt_ids, artefact, SamplingParams(temperature=0, max_tokens=64)):
        ...     if isinstance(event, TextDelta): print(event.text, end="")
    """

    def __init__(self, model, tokenizer, vocab: TokenVocab, record_past: bool = True, retry_bans: bool = True,
                 speculative: SpeculativeConfig | None = None, grammar_check_first: bool = True):
        self.model = model
        self.grammar_check_first = grammar_check_first
        self.tokenizer = tokenizer
        self.vocab = vocab
        self.record_past = record_past
        self.retry_bans = retry_bans
        self.eos_ids = frozenset(vocab.eos_ids | generation_eos_ids(model))
        self.vocab_size = model.config.get_text_config().vocab_size
        self.speculative = speculative if speculative is not None else SpeculativeConfig()
        if has_sliding_layers(model):
            self.speculative = SpeculativeConfig(num_tokens=0)

    def session(self, artefact: ArtefactLike | None, params: SamplingParams, prompt_tokens: int = 0) -> GuardSession:
        """The guard session of one request on this decoder (its eos ids, logits width and retry policy; the
        request's rollback budget and evasion guard).

        Raises:
            ValueError: an artefact compiled for another vocab.
        """
        return GuardSession.from_params(artefact, self.vocab, params, eos_ids=self.eos_ids,
                                        num_logits=self.vocab_size, prompt_tokens=prompt_tokens,
                                        retry_bans=self.retry_bans)

    def stream(self, prompt_ids: Sequence[int], artefact: ArtefactLike | None, params: SamplingParams,
               cancel: threading.Event | None = None) -> Iterator[Event]:
        """Generate after ``prompt_ids``, yielding :class:`TextDelta` and :class:`Rollback` events and, last,
        one :class:`Finish`.

        Args:
            prompt_ids: the prompt's token ids (:mod:`guardrail.prompts`), not empty.
            artefact: the compiled word lists for this vocab; ``None`` decodes unguarded (same loop, no
                matcher, no masks: the benchmark's baseline).
            params: sampling, stop conditions and rollback budget.
            cancel: when set, the generation ends at the next step with ``Finish(reason="cancelled")``.

        Raises:
            ValueError: empty prompt, a token id outside the vocab in ``prompt_ids`` or ``params``, or an
                artefact compiled for another vocab (raised by this call, before any model work).
        """
        return Generation(self, prompt_ids, artefact, params, cancel).run()


class DecodeKV(Protocol):
    """The KV cache a :class:`Generation` decodes on: a :class:`KVCache` (single stream), or a batched row's
    slice of a :class:`~guardrail.engines.transformers.batch_cache.BatchKVCache`. The generation reads it
    and rolls it back; whoever runs the forward passes advances it.

    Attributes:
        length: tokens held (prompt + completion, fed drafts included).
        forward_passes: forward passes this generation took part in (its prefill counts).
        reprefills: rollbacks done by rebuilding the cache.
    """

    length: int
    forward_passes: int
    reprefills: int

    def rollback_to(self, length: int, token_ids: Sequence[int]) -> bool:
        """Drop every column after the first ``length`` tokens; ``token_ids`` are the ``length`` tokens that
        stay (for a cache that must rebuild itself). Returns whether it re-prefilled."""
        ...

    def reprefill(self, token_ids: Sequence[int]) -> torch.Tensor:
        """Rebuild the cache from ``token_ids``; the next-token logits ``(1, vocab)`` float32."""
        ...


class Feed:
    """A forward pass a :class:`Generation` asks for: it kept ``tokens[0]`` and drafted ``tokens[1:]``.

    The engine feeds them after the held tokens (it may feed only the first ``n``, ``1 <= n <=
    len(tokens)``: fewer drafts, e.g. when verifying them would slow its batch down), advances the
    :class:`DecodeKV` by ``n`` tokens and one forward pass, and sends the logits after each fed token,
    ``(n, vocab)`` float32, back into :meth:`Generation.steps`.
    """

    __slots__ = ("tokens",)

    def __init__(self, tokens: list[int]):
        self.tokens = tokens


class Marker:
    """What :meth:`Generation.steps` yields between the parts of one step: :data:`PICKED` after a pick, before
    the guard judges it, and :data:`JUDGED` after the guard's verdict, before the engine acts on it.

    The batched engine runs every row to its pick, then every row's guard, then every row's verdict, so that
    the guards' Python (matcher, release) runs back to back, its data still in the CPU caches, instead of
    between each row's own pick, processors and bookkeeping, which evict it (issue 29). Resume the loop with
    ``next``; a single-stream loop just goes on (:meth:`Generation.run` never yields one).
    """

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


#: The loop picked a token; next it asks the guard (``GuardSession.accept``).
PICKED = Marker("PICKED")
#: The guard judged the pick; next the verdict is applied (keep: a :class:`Feed`; rollback: a pick again).
JUDGED = Marker("JUDGED")


class Generation(VerdictHandler):
    """One request's decode state on the transformers engine: kept logits, processors, picker, drafter and
    the loop; the guard state is its :class:`GuardSession` (:attr:`session`), the verdicts are applied
    through :func:`guardrail.guard.verdict.judge`.

    The single-stream decoder runs it with :meth:`run` (own :class:`KVCache`, its forward passes run at
    once); the batched engine composes one per row and drives :meth:`steps` itself, running the forward
    pass that each :class:`Feed` asks for in one batch pass.

    Args:
        decoder: the model, vocab, EOS ids, retry-bans policy and speculative settings.
        prompt_ids: the prompt's token ids, not empty.
        artefact: the compiled lists (``None``: unguarded).
        params: sampling, stop conditions and rollback budget.
        cancel: when set, the generation ends at its next pick with ``Finish(reason="cancelled")``.

    Raises:
        ValueError: empty prompt, a token id outside the vocab in ``prompt_ids`` or ``params``, an
            artefact compiled for another vocab, or a ``response_format`` schema that does not compile.

    Attributes:
        prompt: the prompt's token ids.
        session: the guard session.
        grammar: the request's :class:`~guardrail.grammar.matcher.GrammarState` (``None``: free text).
        acceptance: the running average share of drafted tokens accepted (0..1; the batched engine reads it
            to size its verification passes).
        kv: the :class:`DecodeKV` given to :meth:`steps` (``None`` before).
    """

    def __init__(self, decoder: StreamingDecoder, prompt_ids: Sequence[int], artefact: ArtefactLike | None,
                 params: SamplingParams, cancel: threading.Event | None = None):
        self.decoder = decoder
        self.prompt = [int(t) for t in prompt_ids]
        self.params = params
        self.cancel = cancel
        if not self.prompt:
            raise ValueError("prompt_ids must not be empty")
        size = len(decoder.vocab)
        bad = [t for t in self.prompt if not 0 <= t < size]
        if bad:
            raise ValueError(f"prompt_ids: token ids must be in [0, {size}), got {bad[:10]}")
        params.check_vocab(size)
        self.session = decoder.session(artefact, params, len(self.prompt))
        # The loop end (cancel, deadline, room, judge, finish, usage) is the engine-independent driver's; the
        # service checks the context before admission, so no context bound here (as before the driver).
        self.driver = DecodeDriver(self.session, timeout_s=params.timeout_s, max_tokens=params.max_tokens,
                                   cancel=cancel)
        # The request's JSON grammar (docs/structured-output.md): follows the session's kept tokens.
        self.grammar = (GrammarState(params.response_format, decoder.tokenizer, decoder.vocab, self.session.eos_ids,
                                     decoder.vocab_size) if params.response_format is not None else None)
        # Check the pick first (GrammarState.pick), unless a warper keeps candidates by rank or mass: unmasked,
        # forbidden tokens would take places among them and the masked distribution would differ.
        self.grammar_first = self.grammar is not None and (
            not decoder.grammar_check_first
            or (not params.greedy and bool(params.top_k or params.top_p < 1.0 or params.min_p > 0.0)))
        self.processors = build_processors(params, len(self.prompt), decoder.eos_ids)
        self.warpers = build_warpers(params, decoder.vocab_size)
        self.picker = TokenPicker(params)
        self.mask = BanMask()
        #: ``(position, ids)``: the engine masked the logits of ``position`` with ``ids`` before handing them over
        #: (:class:`~guardrail.engines.transformers.sampling.BatchBanMask`); the pick skips that write.
        self.premasked: tuple[int, object] | None = None
        self.kv: DecodeKV | None = None
        self.input_ids = None
        if self.processors or self.warpers:
            # Processors read the prefix as (1, seq_len) int64: one buffer, written once per kept token.
            self.input_ids = torch.zeros((1, len(self.prompt) + params.max_tokens + 1), dtype=torch.long)
            self.input_ids[0, :len(self.prompt)] = torch.tensor(self.prompt)
        self.logits: dict[int, torch.Tensor] = {}  # completion position -> raw logits (1, vocab)
        # Only with logprobs asked: completion position -> log_softmax of its raw logits (1, vocab) float32,
        # taken before the bans mask the kept logits in place; dropped with the logits.
        self.raw_logprobs: dict[int, torch.Tensor] | None = {} if params.logprobs is not None else None
        self.cached_tokens = 0  # prompt tokens loaded from a prefix cache (reported in Usage)
        self.started = time.perf_counter()
        speculative = decoder.speculative
        self.draft_limit = speculative.num_tokens if params.speculative else 0
        self.drafter: Drafter | None = speculative.drafter() if self.draft_limit else None
        if self.drafter is not None:
            self.drafter.extend(self.prompt)
        self.verify_cost = speculative.cost
        self.acceptance = INITIAL_ACCEPTANCE
        self.draft_tokens = self.accepted_draft_tokens = 0
        # Drafted tokens already in the KV cache past the kept ones, each with the logits after it (1, vocab).
        self._pending: list[tuple[int, torch.Tensor]] = []
        self._verifying = [0, 0]  # of the last verification pass: drafts fed, drafts accepted so far
        self._out: list[Event] = []  # events of the verdict being applied, yielded by the loop
        self._feed: Feed | None = None  # the forward pass the last keep asks for (None: a verified draft)

    def run(self) -> Iterator[Event]:
        """The single-stream loop: prefill on an own :class:`KVCache`, then :meth:`steps`, each
        :class:`Feed` run at once."""
        started = time.perf_counter()
        kv = KVCache(self.decoder.model, self.decoder.record_past)
        mask = BatchBanMask()  # a batch of one: row 0 of each pass is the next position's logits
        steps = self.steps(kv, mask.apply(kv.forward(self.prompt), [self]), started)
        item = next(steps, None)
        while item is not None:
            if isinstance(item, Feed):
                item = steps.send(mask.apply(kv.forward_all(item.tokens), [self]))
            else:
                if not isinstance(item, Marker):
                    yield item
                item = next(steps, None)

    def steps(self, kv: DecodeKV, logits: torch.Tensor, started: float, cached_tokens: int = 0
              ) -> Generator[Event | Feed | Marker, torch.Tensor, None]:
        """The decode loop after a prefill run elsewhere.

        Args:
            kv: the cache holding the prompt (``kv.length == len(prompt)``).
            logits: ``(1, vocab)`` float32, the next-token logits after the prompt.
            started: ``time.perf_counter()`` when the generation began (its ``timeout_s`` counts from there).
            cached_tokens: prompt tokens loaded from a prefix cache (reported in :class:`Usage`).

        Returns:
            A generator yielding events (:class:`TextDelta`, :class:`Rollback`, last one :class:`Finish`),
            a :class:`Feed` where it needs a forward pass (send it that pass's logits), and the
            :class:`Marker` objects :data:`PICKED` (after each pick) and :data:`JUDGED` (after the guard's
            verdict on it; resume it with ``next``).
        """
        self.kv = kv
        self.logits[0] = logits
        self.started = self.driver.started = started
        self.cached_tokens = cached_tokens
        return self._loop()

    # -- the loop ---------------------------------------------------------------------------------------
    def _loop(self) -> Generator[Event | Feed | Marker, torch.Tensor, None]:
        driver = self.driver
        while True:
            reason = driver.stop_reason()  # cancelled, or past the deadline
            if reason is not None:
                yield from self._finished(reason)
                return
            token = self._pick()
            if token is None:  # every candidate is banned here
                yield from self._finished("content_filter")
                return
            picked = self._pick_logprobs(token) if self.raw_logprobs is not None else None
            yield PICKED  # the batched engine runs the guards once every row picked ...
            step = driver.accept(token, picked)
            yield JUDGED  # ... and the verdicts once every guard judged
            kind = driver.apply(step, token, self)
            if self._out:  # most kept tokens release nothing yet (hold-back): no generator for them
                yield from self._drain()
            if kind == FINISH:
                return
            if kind == KEEP and self._feed is not None:
                feed, self._feed = self._feed, None
                self._fed(feed, (yield feed))

    def _drain(self) -> Iterator[Event]:
        out, self._out = self._out, []
        yield from out

    def _finished(self, reason: FinishReason) -> Iterator[Event]:
        self.on_finish(reason)
        yield from self._drain()

    # -- the verdicts (guardrail.guard.verdict) ---------------------------------------------------------
    def emit(self, events: Sequence[Event]) -> None:
        self._out.extend(events)

    def on_keep(self, token_id: int, position: int) -> None:
        """Record the kept token; a verified draft supplies the logits of ``position``, else ask for a pass."""
        logits = self.logits
        if self.input_ids is not None:
            self.input_ids[0, len(self.prompt) + position - 1] = token_id
        frontier = self.session.frontier
        for old in [p for p in logits if p < frontier]:  # no rollback can reach them any more
            del logits[old]
        if self.raw_logprobs:
            for old in [p for p in self.raw_logprobs if p < frontier]:
                del self.raw_logprobs[old]
        if self.drafter is not None:
            self.drafter.extend([token_id])
        if self._pending and self._pending[0][0] == token_id:  # a verified draft: no forward pass
            logits[position] = self._pending.pop(0)[1]
            self.accepted_draft_tokens += 1
            self._verifying[1] += 1
            if not self._pending:
                self._verified()
            return
        if self._pending:  # the pick differs from the draft: its column and the later ones go
            self._pending = []
            self._verified()
            self._kv.rollback_to(len(self.prompt) + position - 1, self.prompt + list(self.session.token_ids))
        self._feed = Feed([token_id, *self._drafts()])

    def on_rollback(self, position: int) -> None:
        """Crop the cache to ``prompt + position``, keep the logits of ``position`` (rollback costs no forward
        pass) and drop later ones."""
        if self._pending:  # the rollback crops their columns with the rest
            self._pending = []
            self._verified()
        if self.drafter is not None:
            self.drafter.rollback_to(len(self.prompt) + position)
        kv = self._kv
        keep = len(self.prompt) + position
        for later in [p for p in self.logits if p > position]:
            del self.logits[later]
        if self.raw_logprobs:
            for later in [p for p in self.raw_logprobs if p > position]:
                del self.raw_logprobs[later]
        if kv.length > keep:
            kv.rollback_to(keep, self.prompt + list(self.session.token_ids))
        if position not in self.logits:  # not expected (the frontier bounds rollbacks); recompute rather than fail
            self.logits[position] = kv.reprefill(self.prompt + list(self.session.token_ids))

    def on_finish(self, reason: FinishReason) -> None:
        kv = self._kv
        self._out.extend(self.driver.finish(
            reason, forward_passes=kv.forward_passes, reprefills=kv.reprefills, cached_tokens=self.cached_tokens,
            draft_tokens=self.draft_tokens, accepted_draft_tokens=self.accepted_draft_tokens))

    @property
    def _kv(self) -> DecodeKV:
        assert self.kv is not None, "steps() sets the cache"
        return self.kv

    def _fed(self, feed: Feed, out: torch.Tensor) -> None:
        """The engine ran ``feed`` (maybe fewer drafts): keep the logits of the kept token, hold the drafts'."""
        position = self.session.position
        fed = len(out) - 1
        self.logits[position] = out[0:1]
        if fed:
            drafts = feed.tokens[1:]
            self._pending = [(drafts[i], out[i + 1:i + 2]) for i in range(fed)]
            self._verifying = [fed, 0]
            self.draft_tokens += fed

    # -- speculative decoding ----------------------------------------------------------------------------
    def _drafts(self) -> list[int]:
        """Tokens to verify after the one being fed: as many of the drafter's as pay off (:func:`draft_width`),
        never past ``max_tokens``."""
        if self.drafter is None:
            return []
        room = min(self.draft_limit, self.driver.room())
        proposed = self.drafter.propose(room) if room > 0 else []
        width = draft_width(self.acceptance, len(proposed), room, self.verify_cost)
        if proposed and width == 0:  # drafts stopped paying: drift back up so that they are tried again
            self.acceptance = min(1.0, self.acceptance + ACCEPTANCE_RECOVERY)
        return proposed[:width]

    def _verified(self) -> None:
        """The last verification pass is resolved: fold its acceptance share into the average."""
        fed, accepted = self._verifying
        if fed:
            self.acceptance += ACCEPTANCE_SMOOTHING * (accepted / fed - self.acceptance)
        self._verifying = [0, 0]

    # -- one pick ------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def _pick(self) -> int | None:
        grammar = self.grammar
        if grammar is None:
            return self.picker.pick(self._scores())
        scores = self._scores()
        room = self.driver.room()
        if room <= CLOSING_HORIZON:  # near max_tokens: close the value if it would not fit otherwise
            closing = grammar.close_within(scores, self.session.token_ids, room)
            if closing is not None:
                return closing
        if self.grammar_first:
            return self.picker.pick(scores)
        return grammar.pick(scores, self.session.token_ids, self.picker.pick)

    @torch.inference_mode()
    def _pick_logprobs(self, token: int) -> PickLogprobs:
        """The raw logprob of ``token`` at the current position and the ``params.logprobs`` most likely
        alternatives that :meth:`GuardSession.shown_alternatives` lets through (no alternative shows a banned
        term): one ``topk`` of ``k +`` :data:`ALTERNATIVES_MARGIN` over the vocab, then the guard's check of
        each candidate in order (fewer than ``k`` when more than the margin are left out)."""
        assert self.raw_logprobs is not None
        raw = self.raw_logprobs[self.session.position]
        k = self.params.logprobs or 0
        top: tuple[tuple[int, float], ...] = ()
        if k:
            values, ids = raw[0].topk(min(k + ALTERNATIVES_MARGIN, raw.shape[-1]))
            candidates = ((int(i), float(v)) for i, v in zip(ids.tolist(), values.tolist()) if v != -math.inf)
            top = self.session.shown_alternatives(candidates, k)
        return PickLogprobs(float(raw[0, token]), top)

    @torch.inference_mode()  # the kept logits are inference tensors: masked in place in this mode only
    def _scores(self) -> torch.Tensor:
        """Final scores ``(1, vocab)`` of the current position: processors, bans, the grammar when it is masked
        first (:attr:`grammar_first`; else :meth:`_pick` checks the pick against it), warpers."""
        position = self.session.position
        scores = self.logits[position]
        if self.raw_logprobs is not None and position not in self.raw_logprobs:
            # Before the bans below mask the kept logits in place: the model's own distribution (vLLM's
            # raw_logprobs), the same at a re-pick after a rollback.
            self.raw_logprobs[position] = torch.log_softmax(scores.float(), dim=-1)
        # int64, so a LongTensor; transformers' processors are typed for that class, which slicing never returns.
        prefix = (cast(torch.LongTensor, self.input_ids[:, :len(self.prompt) + position])
                  if self.input_ids is not None else None)
        if self.processors:
            assert prefix is not None, "input_ids is allocated whenever there are processors"
            scores = self.processors(prefix, scores)
        # In place is safe even on the kept raw logits: the always-banned mask is idempotent, and the bans
        # of a position only grow while its logits are valid (a rollback to an earlier position discards
        # both). The processors above never modify their input.
        ids = self.session.mask_ids()
        premasked = self.premasked
        if premasked is None or premasked[0] != position or premasked[1] is not ids:
            self.mask.apply(scores, ids)
        if self.grammar_first:  # the same in-place argument: fixed while the logits of `position` are kept
            assert self.grammar is not None
            self.grammar.apply(scores, self.session.token_ids)
        if self.warpers:
            assert prefix is not None, "input_ids is allocated whenever there are warpers"
            scores = self.warpers(prefix, scores)
        return scores
