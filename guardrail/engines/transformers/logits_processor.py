"""Mask-only guarding inside ``model.generate``: a transformers ``LogitsProcessor`` over guard sessions.

For people who hold their own model and keep calling ``generate``::

    processor = MaskOnlyLogitsProcessor(artefact, vocab)
    out = model.generate(input_ids, logits_processor=[processor], max_new_tokens=64)

Each row of the batch has its own :class:`~guardrail.guard.session.MaskSession`; every call advances it by
the token ``generate`` appended (:meth:`MaskSession.advance`) and sets ``-inf`` at
:meth:`MaskSession.mask_ids`: the always-banned ids, every token that would complete a term from the row's
matcher state (the mask primitive), and the EOS ids when ending the text there would complete a word term.

What mask-only guarantees, and what it cannot (the full rollback decoder,
:class:`~guardrail.engines.transformers.decoder.StreamingDecoder` / ``Guard.from_model``, has none of these
limits):

* **Guaranteed**: no token is emitted that completes a banned term from the text before it, in any casing
  or tokenization the artefact covers — in particular a term that is a single token never appears, and
  substring/prefix terms never appear at all.
* **After the fact**: a ``word`` term is only complete once its right boundary is known, i.e. on the *next*
  token (" cat" is a match only if a non-letter follows). The processor masks every token that would close
  the word there, and EOS, but ``max_new_tokens`` (or a stop criterion) can still end the text right after
  the word: the term then stands at the very end. :meth:`MaskOnlyLogitsProcessor.missed` (given ``generate``'s
  output) reports such hits per row; nothing can take the text back.
* **Glued and misspelled forms**: masking only the completing tokens leaves the term's beginning in the text,
  so the model continues it some other way — " cat" + "s", "Thank" + "you", "sorr" + "y" — the glued evasions
  of docs/matching.md. Only a rollback to where the term began (and a ban there) gives fluent text; a mask
  cannot go back.
* **If every token is masked** at some step (scores all ``-inf``), ``generate`` picks anyway; the hit is
  recorded after the fact like the above.

Limits of the integration: ``num_beams == 1`` only (beam search reorders rows between steps; detected and
refused with ``ValueError``); one ``generate`` call per processor at a time (a call whose input is not the
previous input plus one token starts new sessions).
"""

from __future__ import annotations

import math
from typing import cast

import torch
from transformers import LogitsProcessor

from guardrail.guard.session import MaskSession
from guardrail.matching.combined import ArtefactLike
from guardrail.matching.token_matcher import Hit
from guardrail.matching.vocab import TokenVocab


class MaskOnlyLogitsProcessor(LogitsProcessor):
    """Mask the tokens that would complete a banned term, row by row (mask-only: see the module docstring).

    Args:
        artefact: the compiled word lists for ``vocab``.
        vocab: the tokenizer's bytes table (``TokenVocab.from_tokenizer``).
        eos_ids: ids that end the text (default ``vocab.eos_ids``).

    Raises:
        ValueError: an artefact compiled for another vocab.

    Attributes:
        sessions: one guard session per row of the current ``generate`` call (empty before the first call).

    Example:
        >>> processor = MaskOnlyLogitsProcessor(artefact, vocab)
        >>> out = model.generate(ids, logits_processor=[processor], do_sample=False, max_new_tokens=32)
        >>> processor.missed(out)   # per row: terms completed after the fact (the text ended on a pending word)
    """

    def __init__(self, artefact: ArtefactLike, vocab: TokenVocab, eos_ids=None):
        if artefact.vocab.fingerprint != vocab.fingerprint:
            raise ValueError("artefact was compiled for another tokenizer (vocab fingerprint differs)")
        self.artefact = artefact
        self.vocab = vocab
        self.eos_ids = frozenset(vocab.eos_ids if eos_ids is None else (int(t) for t in eos_ids))
        self.sessions: list[MaskSession] = []
        self._done: list[bool] = []
        self._previous: torch.Tensor | None = None  # input_ids of the previous call
        self._ended = False  # missed(sequences) checked the end of the text

    def missed(self, sequences: torch.Tensor | None = None) -> list[list[Hit]]:
        """Per row: terms completed after the fact (see the module docstring).

        Args:
            sequences: ``generate``'s output ``(batch, seq_len)`` int64. A processor never sees the last
                generated token (no step follows it) nor the end of the text: pass the output to check both
                (once; later calls return the same). Without it, the hits seen up to the last step.
        """
        if sequences is not None and self._previous is not None and not self._ended:
            self._ended = True
            start = self._previous.shape[1]
            for row, tokens in enumerate(sequences[:, start:].tolist()):
                session = self.sessions[row]
                for token in tokens:
                    if self._done[row]:
                        break
                    self._done[row] = token in self.eos_ids
                    session.advance(token)
                if not self._done[row]:
                    session.end_of_text()
                    self._done[row] = True
        return [list(s.missed) for s in self.sessions]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        """Advance each row's session by its new token and mask what would complete a term.

        Args:
            input_ids: ``(batch, seq_len)`` int64, prompt plus the tokens generated so far.
            scores: ``(batch, vocab)`` float, the next-token scores.

        Returns:
            ``(batch, vocab)`` new scores, ``-inf`` at the masked ids (the input is not modified).

        Raises:
            ValueError: rows reordered between calls (beam search).
        """
        batch = input_ids.shape[0]
        if not self._continues(input_ids):
            self._start(batch, scores.shape[-1])
        else:
            for row, token in enumerate(input_ids[:, -1].tolist()):
                if self._done[row]:
                    continue
                if token in self.eos_ids:
                    self._done[row] = True
                self.sessions[row].advance(token)
        self._previous = input_ids.clone()
        masked = scores.clone()
        for row, session in enumerate(self.sessions):
            if not self._done[row]:
                ids = session.mask_ids()
                if len(ids):
                    masked[row, torch.from_numpy(ids)] = -math.inf
        # transformers types a logits processor's scores as FloatTensor, which torch's ops never return.
        return cast(torch.FloatTensor, masked)

    def _continues(self, input_ids: torch.Tensor) -> bool:
        """Whether ``input_ids`` is the previous call's input plus one token per row (else a new ``generate``)."""
        previous = self._previous
        if previous is None or input_ids.shape != (previous.shape[0], previous.shape[1] + 1):
            return False
        if torch.equal(input_ids[:, :-1], previous):
            return True
        rows = {tuple(r) for r in previous.tolist()}
        if all(tuple(r) in rows for r in input_ids[:, :-1].tolist()):
            raise ValueError("MaskOnlyLogitsProcessor: rows were reordered between steps (beam search is not supported;"
                             " use num_beams=1)")
        return False

    def _start(self, batch: int, num_logits: int) -> None:
        self.sessions = [MaskSession(self.artefact, self.vocab, eos_ids=self.eos_ids, num_logits=num_logits)
                         for _ in range(batch)]
        self._done = [False] * batch
        self._ended = False
