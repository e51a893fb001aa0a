"""The guard session: the per-request guard state that any engine drives token by token.

A :class:`GuardSession` holds everything the guard decides for one request — the matcher state after
every kept token, position bans and retry bans, the rollback budget, stop strings, the end-of-text rule,
hold-back and the release of final text, the events — and nothing of the engine: no tensors, no KV cache,
no sampling, no callbacks. The engine asks it what to mask, tells it what it picked, and acts on the
plain :class:`Step` it gets back — through :func:`guardrail.guard.verdict.judge`, the one place that turns
a step into the engine's keep / rollback / finish (docs/design.md, "The decode step")::

    session = GuardSession.from_params(artefact, vocab, params, eos_ids=eos)
    while True:
        scores[:, session.mask_ids()] = -inf      # the same array object until it changes: cache its tensor
        token = pick(scores)                          # from the kept logits of session.position
        if token is None:                             # every candidate banned
            emit(session.finish("content_filter")); break
        kind = judge(session, token, handler)         # handler.emit(events), then one of:
        # on_keep(token, position):  logits[position] = forward(token); drop kept logits < session.frontier
        # on_rollback(position):     crop the KV cache to prompt + position; drop kept logits > position
        # on_finish(reason):         emit(session.finish(reason, ...counters))
        if kind == FINISH: break

Evasion guard: a term that caused a rollback is escalated — also matched as a substring from where it began
to the end of the generation (:mod:`guardrail.guard.escalation`); nothing changes for the engine, which sees
the escalation's hits as rollbacks and its masks in :meth:`GuardSession.mask_ids`.

Rollback contract: a rollback never goes before :attr:`GuardSession.frontier`, so an engine that keeps the
logits of every position in ``[frontier, position]`` rolls back without a forward pass (the transformers
engine does; vLLM resubmits ``prompt + token_ids`` instead). Text handed out in a :class:`TextDelta` is final:
no later rollback, end of text or stop string can retract it.

Engines that can only mask logits (no rollback: a ``LogitsProcessor`` inside ``model.generate`` or vLLM) use
a :class:`MaskSession` instead: :meth:`MaskSession.mask_ids` and :meth:`MaskSession.advance` (a weaker
guarantee: see :mod:`guardrail.engines.transformers.logits_processor`). Both types share
:class:`GuardState` (the lists' matcher, the always-banned ids, the completion's tokens and text).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Literal, NamedTuple

import numpy as np

from guardrail.guard.bans import PositionBans
from guardrail.guard.escalation import ESCALATION_ARTEFACTS, Escalation, escalation_terms
from guardrail.guard.events import Event, Finish, FinishReason, Rollback, TextDelta, Usage
from guardrail.guard.holdback import TextBuffer
from guardrail.guard.logprobs import LogprobLedger, PickLogprobs, TokenLogprob
from guardrail.matching.combined import ArtefactLike
from guardrail.matching.token_matcher import Hit, TokenMatcher
from guardrail.matching.token_text import token_set
from guardrail.matching.vocab import TokenVocab
from guardrail.params import DEFAULT_EVASION_GUARD, EvasionGuard, SamplingParams, check_evasion_guard

#: ``Hit.term_id`` of a stop-string cut whose text could not be checked (see ``GuardSession._probe_cut``).
UNCHECKED_CUT = -1

StepKind = Literal["keep", "rollback", "finish"]
KEEP: StepKind = "keep"
ROLLBACK: StepKind = "rollback"
FINISH: StepKind = "finish"

#: :meth:`GuardSession.accept` times its second step and then one step in this many (``Usage.guard_step_seconds``):
#: two ``perf_counter_ns`` calls cost ~0.1 us, a few per cent of a ~3 us step if every step were timed
#: (docs/benchmarks.md, "guard per token"); one in 16 makes it ~0.2 %. Not the first step: it pays one-time
#: set-up (milliseconds measured on the gateway), which would swamp a short answer's mean.
GUARD_TIMING_EVERY = 16

_NO_IDS = np.zeros(0, dtype=np.int64)
#: ``{vocab fingerprint: {byte value: id of a token holding exactly that byte}}`` (one entry per tokenizer).
_BYTE_TOKENS: dict[str, dict[int, int]] = {}


class Step(NamedTuple):
    """What the engine does after :meth:`GuardSession.accept`.

    Attributes:
        kind: ``"keep"``: the token was kept, run the forward pass for the logits of ``position``;
            ``"rollback"``: the session went back to ``position`` (bans applied, its own state truncated) —
            crop the KV cache to ``prompt + position`` tokens and pick again from the kept logits of
            ``position``; ``"finish"``: call :meth:`GuardSession.finish` with ``finish_reason``.
        position: completion tokens kept after the step (the rollback target, for a rollback).
        events: :class:`TextDelta` and :class:`Rollback` events to forward to the client, in order.
        finish_reason: set when ``kind == "finish"``.
    """

    kind: StepKind
    position: int
    events: tuple[Event, ...] = ()
    finish_reason: FinishReason | None = None


def byte_tokens(vocab: TokenVocab) -> dict[int, int]:
    """``{byte value: id of a token holding exactly that byte}`` (built once per vocab).

    Both supported tokenizer families have all 256 (byte-level BPE's alphabet, SentencePiece's ``<0xNN>``),
    except bytes a byte-level vocab lacks (see :class:`~guardrail.matching.vocab.TokenVocab`).
    """
    found = _BYTE_TOKENS.get(vocab.fingerprint)
    if found is None:
        found = {}
        for token_id, data in enumerate(vocab.token_bytes):
            if len(data) == 1 and token_id not in vocab.special_ids:
                found.setdefault(data[0], token_id)
        _BYTE_TOKENS[vocab.fingerprint] = found
    return found


def _check_count(name: str, value: object, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")


class GuardState:
    """The state both session types share: the lists' matcher after the tokens so far, the always-banned
    ids, the completion's tokens and text. Built through :class:`GuardSession` (rollback engines) or
    :class:`MaskSession` (mask-only engines), never alone.

    Args:
        artefact: the compiled word lists for ``vocab``; ``None`` guards nothing (same bookkeeping, no
            matcher: the benchmarks' unguarded baseline).
        vocab: the tokenizer's bytes table.
        eos_ids: ids that end the text (default ``vocab.eos_ids``); never pushed to the matcher.
        stop: stop strings (non-empty); the answer ends before the first one, which is never emitted.
        num_logits: width of the engine's logits rows (``model.config.vocab_size``); ids from
            ``len(vocab)`` up to it (padded embeddings) carry no text and are always banned.

    Raises:
        ValueError: the artefact was compiled for another vocab, or ``num_logits`` below 1.

    Attributes:
        matcher: the lists' :class:`TokenMatcher` (``None`` when unguarded).
        text: the completion's bytes and release cursor (:class:`TextBuffer`).
    """

    #: Whether the matcher keeps its pushed ids in the state's own token list (see :class:`TokenMatcher`).
    _shares_tokens = False

    def __init__(self, artefact: ArtefactLike | None, vocab: TokenVocab, *, eos_ids: Iterable[int] | None = None,
                 stop: Sequence[str] = (), num_logits: int | None = None):
        if artefact is not None and artefact.vocab.fingerprint != vocab.fingerprint:
            raise ValueError("artefact was compiled for another tokenizer (vocab fingerprint differs)")
        if num_logits is not None:
            _check_count("num_logits", num_logits, 1)
        self.eos_ids = frozenset(vocab.eos_ids if eos_ids is None else (int(t) for t in eos_ids))
        self.artefact = artefact
        self.vocab = vocab
        self._tokens: list[int] = []
        # A GuardSession's matcher keeps its ids in the session's list (pushes append them); a MaskSession
        # restarts its matcher after a miss, so the two lists part.
        shared = self._tokens if self._shares_tokens else None
        self.matcher = TokenMatcher(artefact, shared) if artefact is not None else None
        always = artefact.always_banned if artefact is not None else _NO_IDS
        if num_logits is not None and num_logits > len(vocab):
            always = np.concatenate([always, np.arange(len(vocab), num_logits, dtype=np.int64)])
        self._lists_always_banned = np.array(always, dtype=np.int64)
        self.text = TextBuffer(vocab.token_bytes, stop)
        self._finished = False

    @property
    def position(self) -> int:
        """Completion tokens kept (the index of the position the engine picks for next)."""
        return len(self._tokens)

    @property
    def token_ids(self) -> tuple[int, ...]:
        """The kept completion token ids (an engine that re-prefills feeds ``prompt + token_ids``)."""
        return tuple(self._tokens)

    @property
    def always_banned(self) -> np.ndarray:
        """Ids masked at every position from the current one on: tokens whose own text completes a term,
        padded logits (``int64 (k,)``, sorted, not to be modified). :class:`GuardSession` adds the escalated
        terms' from their escalation position on."""
        return self._lists_always_banned

    @property
    def finished(self) -> bool:
        """Whether the text ended (:meth:`GuardSession.finish`)."""
        return self._finished

    def completing_ids(self) -> np.ndarray:
        """Token ids that would complete a banned term from the current matcher state (``int64 (k,)``,
        memoised per state by the matcher); empty when unguarded. What a mask-only engine masks."""
        return _NO_IDS if self.matcher is None else self.matcher.completing_tokens()


class MaskSession(GuardState):
    """The guard state of one request on an engine that can only mask logits, never roll back (a
    ``LogitsProcessor`` inside ``model.generate`` or vLLM): mask :meth:`mask_ids`, report what was emitted
    with :meth:`advance`. A weaker guarantee than :class:`GuardSession`'s: see
    :mod:`guardrail.engines.transformers.logits_processor`.

    Args: as :class:`GuardState` (no stop strings: the engine stops by itself).

    Attributes:
        missed: hits that completed after the fact (see :meth:`advance`), in order.
    """

    def __init__(self, artefact: ArtefactLike | None, vocab: TokenVocab, *, eos_ids: Iterable[int] | None = None,
                 num_logits: int | None = None):
        super().__init__(artefact, vocab, eos_ids=eos_ids, num_logits=num_logits)
        self.missed: list[Hit] = []

    def mask_ids(self) -> np.ndarray:
        """:attr:`always_banned` ∪ :meth:`completing_ids`, plus the EOS ids when ending the text here would
        complete a ``word`` term (``int64 (k,)``, sorted, a new array)."""
        parts = [self.always_banned, self.completing_ids()]
        if self.matcher is not None and self.matcher.finish() is not None:
            parts.append(np.fromiter(self.eos_ids, dtype=np.int64, count=len(self.eos_ids)))
        return np.unique(np.concatenate(parts))

    def advance(self, token_id: int) -> Hit | None:
        """Record the token the engine emitted, which the session cannot refuse.

        Returns:
            ``None``, or the :class:`Hit` of a term the token completed *after the fact* (the engine masked
            :meth:`mask_ids` but could not prevent it: every candidate was masked, or the text ends on a
            pending word boundary). The hit is appended to :attr:`missed` and matching restarts after the
            token as at a text start. An EOS id ends the text: its hit is :meth:`end_of_text`'s.
        """
        if token_id in self.eos_ids:
            return self.end_of_text()
        matcher = self.matcher
        hit = matcher.push(token_id) if matcher is not None else None
        if matcher is not None and hit is not None:
            self.matcher = TokenMatcher(matcher.artefact)
            self.missed.append(hit)
        self._tokens.append(token_id)
        self.text.append(token_id)
        return hit

    def end_of_text(self) -> Hit | None:
        """The text ended here (EOS, a length limit): the end-of-text check, a hit recorded in
        :attr:`missed` (a ``word`` term standing at the very end)."""
        hit = self.matcher.finish() if self.matcher is not None else None
        if hit is not None:
            self.missed.append(hit)
        return hit


class GuardSession(GuardState):
    """The guard state of one request on a rollback engine, which drives it token by token.

    Args:
        artefact: the compiled word lists for ``vocab``; ``None`` guards nothing (same bookkeeping, no
            matcher: the benchmarks' unguarded baseline).
        vocab: the tokenizer's bytes table.
        eos_ids: ids that end the text (default ``vocab.eos_ids``); never pushed to the matcher.
        stop: stop strings (non-empty); the answer ends before the first one, which is never emitted.
        max_tokens: completion tokens to keep at most (``None``: the engine stops on its own).
        max_rollbacks: rollbacks allowed per request before ``content_filter``.
        max_rollbacks_per_position: rollbacks to one position allowed before ``content_filter``.
        retry_bans: after a rollback also ban the tokens that would begin the same term at least as deep
            (:meth:`TokenMatcher.retry_bans`); ``False`` bans only the term's first token.
        num_logits: width of the engine's logits rows (``model.config.vocab_size``); ids from
            ``len(vocab)`` up to it (padded embeddings) carry no text and are always banned.
        prompt_tokens: prompt length, reported in :class:`Usage`.
        evasion_guard: ``"substring"`` (default): a term that caused a rollback is also matched as a substring
            from where it began to the end of the generation (:mod:`guardrail.guard.escalation`); ``"off"``.
        logprobs: the request asked for logprobs (``SamplingParams.logprobs`` is not ``None``): every
            :meth:`accept` must carry the pick's :class:`PickLogprobs`, and the :class:`TextDelta` events carry
            the delivered tokens' records (:mod:`guardrail.guard.logprobs`).

    Raises:
        ValueError: the artefact was compiled for another vocab, or an argument is out of range (named).

    Attributes:
        always_banned: ``int64 (k,)`` ids masked at every position from the current one on (tokens whose own
            text completes a term, padded logits, and the escalated terms' from their escalation position
            on); the same object until an escalation starts or is dropped. What an engine that resubmits
            after a rollback (vLLM) masks always.
        frontier: no rollback goes before this position: the logits of earlier positions may be dropped.
        rollbacks: rollbacks so far (including same-position re-picks).
        text: the completion's bytes and release cursor (:class:`TextBuffer`).
    """

    _shares_tokens = True  # the matcher's pushes keep the session's tokens: no second list per token

    def __init__(self, artefact: ArtefactLike | None, vocab: TokenVocab, *, eos_ids: Iterable[int] | None = None,
                 stop: Sequence[str] = (), max_tokens: int | None = None, max_rollbacks: int = 64,
                 max_rollbacks_per_position: int = 8, retry_bans: bool = True, num_logits: int | None = None,
                 prompt_tokens: int = 0, evasion_guard: EvasionGuard = DEFAULT_EVASION_GUARD, logprobs: bool = False):
        super().__init__(artefact, vocab, eos_ids=eos_ids, stop=stop, num_logits=num_logits)
        if max_tokens is not None:
            _check_count("max_tokens", max_tokens, 1)
        _check_count("max_rollbacks", max_rollbacks, 0)
        _check_count("max_rollbacks_per_position", max_rollbacks_per_position, 0)
        _check_count("prompt_tokens", prompt_tokens, 0)
        self.evasion_guard = check_evasion_guard(evasion_guard)
        self.max_tokens = max_tokens
        self.max_rollbacks = max_rollbacks
        self.max_rollbacks_per_position = max_rollbacks_per_position
        self.retry_bans = retry_bans
        self.prompt_tokens = prompt_tokens
        self.bans = PositionBans()
        self.frontier = 0
        self.rollbacks = 0
        self.started = time.perf_counter()
        self._rollbacks_at: dict[int, int] = {}
        # The releasable count (matcher and escalations) after the first k completion tokens (see
        # _release_limit): _reach[k] where it is below k (a match may still begin before k), k itself where
        # absent. Most prose tokens leave none pending, and this way store nothing: after a forward pass has
        # evicted the CPU caches, every object a token touches costs a miss. _reach_last: after them all.
        self._reach: dict[int, int] = {}
        self._reach_last = 0
        # Escalated terms (evasion guard), by escalation position ascending; none until a hit escalates one
        # (the shared empty tuple until then: the per-token check reads no object of this session's own).
        self._escalations: Sequence[Escalation] = ()
        # The lists' always-banned ids ∪ the escalations' (the same object while there are none).
        self._always_banned = self._lists_always_banned
        self._union_of: np.ndarray | None = None  # the position-ban array _union was built from
        self._union_always = self._always_banned  # ... and the always-banned array
        self._union = _NO_IDS
        self._cut_tokens: int | None = None  # where finish() cuts (rollback budget spent), else position
        self._filtered_by: str | None = None  # the list of the term that spent the rollback budget
        self._cut_bytes: int | None = None  # where finish() cuts (a stop string)
        self._steps = 0  # accept() calls; the timed ones are a sample (GUARD_TIMING_EVERY)
        self._timed_steps = 0
        self._timed_ns = 0
        # The kept tokens' picks and the released records (None: no logprobs asked, no cost).
        self._ledger = LogprobLedger(vocab.token_bytes) if logprobs else None

    @classmethod
    def from_params(cls, artefact: ArtefactLike | None, vocab: TokenVocab, params: SamplingParams, *,
                    eos_ids: Iterable[int], num_logits: int | None = None, prompt_tokens: int = 0,
                    retry_bans: bool = True) -> GuardSession:
        """The session of one request with ``params`` (stop strings, ``max_tokens``, rollback budget, evasion
        guard, ``ignore_eos``/``stop_token_ids`` through :meth:`SamplingParams.end_ids`) on an engine whose
        model ends the text with ``eos_ids``. Every engine builds its sessions here.

        Raises:
            ValueError: as the constructor.
        """
        return cls(artefact, vocab, eos_ids=params.end_ids(eos_ids), stop=params.stop,
                   max_tokens=params.max_tokens, max_rollbacks=params.max_rollbacks,
                   max_rollbacks_per_position=params.max_rollbacks_per_position, retry_bans=retry_bans,
                   num_logits=num_logits, prompt_tokens=prompt_tokens, evasion_guard=params.evasion_guard,
                   logprobs=params.logprobs is not None)

    # -- state ----------------------------------------------------------------------------------------
    @property
    def held_back(self) -> int:
        """Kept tokens whose text is not released yet (they may still be rolled back)."""
        return self.position - self.text.token_at(self.text.released)

    @property
    def escalations(self) -> tuple[Escalation, ...]:
        """The terms the evasion guard escalated so far and still in force (empty until a hit escalates one)."""
        return tuple(self._escalations)

    # -- what to mask ---------------------------------------------------------------------------------
    def mask_ids(self) -> np.ndarray:
        """Token ids to mask at the current position: :attr:`always_banned` (the escalated terms' included)
        ∪ the position's bans.

        Returns:
            ``int64 (k,)``, not to be modified. The same array object is returned until the bans in force
            change (a rollback to, or away from, a position with bans; an escalation starting or dropped), so
            an engine may cache the index tensor it builds from it by identity
            (``if ids is not last: index = torch.from_numpy(ids)``).
        """
        extra = self.bans.at(self.position)
        if extra is None:
            return self._always_banned
        if extra is not self._union_of or self._always_banned is not self._union_always:
            self._union_of, self._union_always = extra, self._always_banned
            self._union = np.union1d(self._always_banned, extra)
        return self._union

    @property
    def always_banned(self) -> np.ndarray:
        return self._always_banned

    @property
    def wants_logprobs(self) -> bool:
        """Whether :meth:`accept` must be given the pick's :class:`PickLogprobs` (the request asked)."""
        return self._ledger is not None

    def shown_alternatives(self, candidates: Iterable[tuple[int, float]], k: int) -> tuple[tuple[int, float], ...]:
        """The first ``k`` of ``candidates`` (``(token id, logprob)``, most likely first) that may be reported
        as ``top_logprobs`` alternatives at the current position: no id in :attr:`always_banned` (padded
        logits, tokens whose own text completes a term), and none whose text, after the kept text and ending
        there, would contain a banned term (the lists' and the escalated terms'; a ``word`` term counts at
        that end). So a client that appends an alternative to the answer never reads a banned term. An end id
        (EOS) adds no text: it is shown. Costs a few matcher steps per candidate; only called when asked.
        """
        always = self._always_banned
        shown: list[tuple[int, float]] = []
        for token_id, logprob in candidates:
            if len(shown) >= k:
                break
            at = int(np.searchsorted(always, token_id))
            if at < len(always) and always[at] == token_id:
                continue
            if token_id not in self.eos_ids and self.matcher is not None and self._completes_term(token_id):
                continue
            shown.append((token_id, logprob))
        return tuple(shown)

    def _completes_term(self, token_id: int) -> bool:
        """Whether the kept text followed by ``token_id``, ending there, holds a match (matchers left as they were)."""
        assert self.matcher is not None
        position = self.position
        tracks = [(self.matcher, 0), *((e.matcher, e.start) for e in self._escalations)]
        for track, offset in tracks:
            found = track.push(token_id)
            if found is None:
                found = track.finish()
                track.rollback_to(position - offset)
            if found is not None:
                return True
        return False

    # -- rollback engines -------------------------------------------------------------------------------
    def accept(self, token_id: int, logprobs: PickLogprobs | None = None) -> Step:
        """The engine picked ``token_id`` at :attr:`position`: keep it, roll back, or finish.

        ``logprobs``: what the engine measured at the pick, required when :attr:`wants_logprobs` (else
        ignored); kept with the token, released with its text, dropped with it on a rollback.

        A token that completes a term is not kept: the session rolls back to where the term began, bans
        its first token there (plus the retry bans), drops later bans and truncates its own state, and
        returns ``kind="rollback"``. An EOS id, ``max_tokens`` reached or a stop string end the text — after
        the end-of-text check (a pending ``word`` term at the very end matches and rolls back).

        Raises:
            RuntimeError: after :meth:`finish`.
            ValueError: :attr:`wants_logprobs` and no ``logprobs``.
        """
        self._steps += 1
        if self._steps % GUARD_TIMING_EVERY != 2:
            return self._accept(token_id, logprobs)
        started = time.perf_counter_ns()
        step = self._accept(token_id, logprobs)
        self._timed_ns += time.perf_counter_ns() - started
        self._timed_steps += 1
        return step

    def _accept(self, token_id: int, logprobs: PickLogprobs | None) -> Step:
        if self._finished:
            raise RuntimeError("the session already finished")
        ledger = self._ledger
        if ledger is not None and logprobs is None:
            raise ValueError("this session reports logprobs: accept() needs the pick's PickLogprobs")
        if token_id in self.eos_ids:
            return self._end_of_text("stop", ())
        matcher = self.matcher
        if matcher is not None:
            if self._escalations:  # none until a term caused a rollback
                hit = own = matcher.push(token_id)  # kept in self._tokens unless it completes a term
                source = None
                for escalation in self._escalations:
                    found = escalation.push(token_id)
                    if found is not None and (hit is None or found.start_token < hit.start_token):
                        hit, source = found, escalation
                if hit is not None:
                    if own is None:  # an escalation's hit: the matcher kept the token, which is not kept
                        matcher.rollback_to(len(matcher) - 1)
                    return self._roll_back(hit, (), source, token_id)
                reach = self._releasable()
            else:
                # One call for the matcher's push and releasable count (the common path: most rows of a batch).
                advanced = matcher.advance(token_id)  # kept in self._tokens unless it completes a term
                if isinstance(advanced, Hit):
                    return self._roll_back(advanced, (), None, token_id)
                reach = advanced
            self._reach_last = reach
            if reach != len(self._tokens):
                self._reach[len(self._tokens)] = reach
        else:
            self._tokens.append(token_id)
        text = self.text
        text.append(token_id)
        if ledger is not None:
            assert logprobs is not None
            ledger.keep(logprobs)
        stop_at = text.find_stop(len(self._tokens) - 1)
        if stop_at is not None:
            hit, source = self._probe_cut(stop_at)[1:] if matcher is not None else (None, None)
            if hit is None:
                self._cut_bytes = stop_at
                return Step(FINISH, len(self._tokens), (), "stop")
            return self._roll_back(hit, (), source)
        delta = self.release()
        records = self._released_logprobs() if ledger is not None else ()
        events = (TextDelta(delta, records),) if delta or records else ()
        if self.max_tokens is not None and len(self._tokens) >= self.max_tokens:
            return self._end_of_text("length", events)
        return Step(KEEP, len(self._tokens), events)

    def end_of_text(self, reason: FinishReason = "length") -> Step:
        """The engine ends the text here (its own length limit): a pending ``word`` term at the very end
        matches. Returns ``kind="finish"`` with ``reason``, or the rollback (decode on).

        Raises:
            RuntimeError: after :meth:`finish`.
        """
        if self._finished:
            raise RuntimeError("the session already finished")
        return self._end_of_text(reason, ())

    def release(self) -> str:
        """Text that became final (hold-back: no future match or stop string can claim it); also moves
        :attr:`frontier`. :meth:`accept` calls it and returns the text as a :class:`TextDelta`."""
        return self.text.release(self._release_limit())

    def finish(self, reason: FinishReason, *, forward_passes: int = 0, reprefills: int = 0,
               seconds: float | None = None, cached_tokens: int = 0, draft_tokens: int = 0,
               accepted_draft_tokens: int = 0) -> tuple[Event, ...]:
        """End the stream: the last :class:`TextDelta` (if any) and the :class:`Finish`.

        The answer is cut where :meth:`accept` said (a stop string, the start of a term when the rollback
        budget ran out), else at :attr:`position` — moved back past any term the shorter text would end
        with (a ``word`` term whose boundary the cut closes).

        Args:
            reason: the finish reason (``step.finish_reason``, or the engine's own: ``cancelled``, ``length``
                on its wall-clock limit, ``content_filter`` when every candidate was banned).
            forward_passes, reprefills, cached_tokens, draft_tokens, accepted_draft_tokens: the engine's
                counters, reported in :class:`Usage`.
            seconds: wall time of the generation (default: since the session was built).

        Raises:
            RuntimeError: called twice.
        """
        if self._finished:
            raise RuntimeError("the session already finished")
        self._finished = True
        text = self.text
        cut_bytes = self._cut_bytes
        if cut_bytes is None:
            cut = self.position if self._cut_tokens is None else self._cut_tokens
            if self.matcher is not None:
                self._rewind(cut)
                while (hit := self._finish_hit()[0]) is not None:
                    cut = hit.start_token
                    self._rewind(cut)
            self._truncate(cut)
            cut_bytes = text.end(cut)
        delta = text.release(cut_bytes, final=True)
        records: tuple[TokenLogprob, ...] = ()
        if self._ledger is not None:
            records = self._ledger.finish(self._tokens, text.ends, text.data, cut_bytes)
        usage = Usage(
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.position,
            rollbacks=self.rollbacks,
            forward_passes=forward_passes,
            reprefills=reprefills,
            seconds=time.perf_counter() - self.started if seconds is None else seconds,
            cached_tokens=cached_tokens,
            draft_tokens=draft_tokens,
            accepted_draft_tokens=accepted_draft_tokens,
            guard_step_seconds=self._timed_ns / self._timed_steps / 1e9 if self._timed_steps else None,
        )
        filtered_by = self._filtered_by if reason == "content_filter" else None
        done = Finish(reason, text.text, usage, tuple(self._tokens), filtered_by)
        return (TextDelta(delta, records), done) if delta or records else (done,)

    # -- internals ------------------------------------------------------------------------------------
    def _truncate(self, tokens: int) -> None:
        del self._tokens[tokens:]
        reach = self._reach
        while reach and next(reversed(reach)) > tokens:  # keys ascend: positions are added in order
            reach.popitem()
        self._reach_last = reach.get(tokens, tokens)
        self.text.rollback_to(tokens)  # raises rather than retract released text
        if self._ledger is not None:
            self._ledger.truncate(tokens)  # raises rather than retract released logprobs

    def _released_logprobs(self) -> tuple[TokenLogprob, ...]:
        """The records of the tokens delivered since the last call (the release rule of
        :mod:`guardrail.guard.logprobs`): wholly released, and before :attr:`frontier` (no rollback reaches
        them; a token of no bytes could otherwise sit at the release cursor and still be rolled back)."""
        assert self._ledger is not None
        text = self.text
        whole = min(self.frontier, text.token_at(text.released))
        return self._ledger.release(self._tokens, text.ends, text.data, whole)

    def _end_of_text(self, reason: FinishReason, events: tuple[Event, ...]) -> Step:
        """The text would end here: finish, or roll back to a ``word`` term pending at the very end."""
        while True:
            hit, source = self._finish_hit() if self.matcher is not None else (None, None)
            if hit is None:
                return Step(FINISH, self.position, events, reason)
            step = self._roll_back(hit, events, source)
            # A term that begins in the end-of-text flush itself would leave the text at max_tokens: check
            # that end again rather than ask the engine for logits past its limit.
            if step.kind == FINISH or self.max_tokens is None or self.position < self.max_tokens:
                return step
            events = step.events

    def _roll_back(self, hit: Hit, events: tuple[Event, ...], source: Escalation | None = None,
                   candidate: int | None = None) -> Step:
        """Go back to ``hit.start_token`` and ban the term's first token there (or finish: budget spent).

        ``source``: the escalation that reported the hit (``None``: the lists' matcher). A hit of the lists'
        matcher escalates its term (evasion guard) from ``hit.start_token`` on, unless it already is.
        ``candidate``: the picked token that completed the term and was not kept (``None`` when the hit is in
        the kept text: a stop-string cut, the end of text); its text ends the event's ``fragment``.
        """
        start = hit.start_token
        self.rollbacks += 1
        count = self._rollbacks_at[start] = self._rollbacks_at.get(start, 0) + 1
        if self.rollbacks > self.max_rollbacks or count > self.max_rollbacks_per_position:
            self._cut_tokens = start
            self._filtered_by = hit.list_name
            return Step(FINISH, self.position, events, "content_filter")
        discarded = self.position - start
        # What the event reports (the text is cut below): the retracted fragment and where it stood.
        data, begin = self.text.data, self.text.end(start)
        fragment = bytes(data[begin:]) + (self.vocab.token_bytes[candidate] if candidate is not None else b"")
        offset = len(bytes(data[:begin]).decode("utf-8", "replace"))
        matcher = self.matcher
        assert matcher is not None, "a hit comes from the matcher"
        self._rewind(start)
        banned = {hit.first_token} if hit.first_token >= 0 else set()
        if hit.term_id != UNCHECKED_CUT and self.retry_bans:
            banned |= matcher.retry_bans(hit) if source is None else source.retry_bans(hit)
        escalated = source is None and hit.term_id != UNCHECKED_CUT and self._escalate(hit.term_id, start)
        self.bans.rollback_to(start)
        self.bans.add(start, banned)
        for later in [p for p in self._rollbacks_at if p > start]:
            del self._rollbacks_at[later]
        if discarded:
            self._truncate(start)
        rollback = Rollback(start, hit.list_name, discarded, escalated=escalated, evasion=source is not None,
                            term=hit.term if hit.term_id != UNCHECKED_CUT else "",
                            fragment=fragment.decode("utf-8", "replace"), offset=offset, attempt=count)
        return Step(ROLLBACK, start, (*events, rollback))

    # -- the evasion guard (guardrail/guard/escalation.py) ----------------------------------------------
    def _escalate(self, term_id: int, start: int) -> bool:
        """Escalate ``term_id`` from position ``start`` on (the rollback target of its hit); whether it was."""
        artefact = self.artefact
        if self.evasion_guard == "off" or artefact is None:
            return False
        if any(e.term_id == term_id for e in self._escalations):
            return False
        terms = escalation_terms(artefact.terms[term_id], self.evasion_guard)
        if not terms:
            return False
        compiled = ESCALATION_ARTEFACTS.get(self.vocab, terms, artefact.allows)
        # Every escalation left has start <= this one (_rewind dropped later ones): the list stays sorted.
        self._escalations = [*self._escalations, Escalation(term_id, compiled, start)]
        self._restand()
        return True

    def _rewind(self, position: int) -> None:
        """Put the matchers in the state after ``position`` tokens; drop the escalations that begin later."""
        assert self.matcher is not None, "only called while guarding"
        self.matcher.rollback_to(position)
        escalations = self._escalations
        if escalations and escalations[-1].start > position:
            self._escalations = escalations = [e for e in escalations if e.start <= position]
            self._restand()
        for escalation in escalations:
            escalation.rollback_to(position)

    def _restand(self) -> None:
        """Rebuild :attr:`always_banned` after an escalation started or was dropped."""
        extra = [e.always_banned for e in self._escalations]
        lists = self._lists_always_banned
        self._always_banned = token_set(lists, *extra) if extra else lists

    def _releasable(self) -> int:
        """Leading tokens no match of the current text can begin in: the matcher's and every escalation's."""
        assert self.matcher is not None, "only called while guarding"
        limit = self.matcher.releasable()
        for escalation in self._escalations:
            limit = min(limit, escalation.releasable())
        return limit

    def _finish_hit(self) -> tuple[Hit | None, Escalation | None]:
        """End of text here: the earliest-beginning hit of the matcher and the escalations, and its source."""
        assert self.matcher is not None, "only called while guarding"
        hit, source = self.matcher.finish(), None
        for escalation in self._escalations:
            found = escalation.finish()
            if found is not None and (hit is None or found.start_token < hit.start_token):
                hit, source = found, escalation
        return hit, source

    def _release_limit(self) -> int:
        """Bytes no future match (nor a stop string) can claim, whatever rollbacks come.

        ``matcher.releasable()`` bounds where a match of the *current* text can start, but a rollback to
        ``k`` resumes from the state after ``k`` tokens, which may expect more (" dog" + " cat" rules out
        "dog dog"; rolled back to " dog", it does not). Rollback targets are at or after ``releasable()``,
        and from a target ``k`` the next ones are at or after ``reach[k]`` (the releasable count after ``k``
        tokens), which never decreases along the text. So everything before a *clean* position ``L``
        (``reach[L] == L``: no partial match pending) at or before ``releasable()`` is final.

        Escalations (evasion guard) take part in ``reach``: an escalation starting at ``s`` contributes
        ``s + its releasable count`` from ``s`` on (never below ``reach[s]``, so ``reach`` stays
        non-decreasing), and a rollback to ``k`` keeps exactly the escalations with ``s <= k`` — the ones
        ``reach[k]`` was computed with.
        """
        text = self.text
        cuts = text.stop_cuts()  # [] without stop strings (most requests): the short paths below
        if self.matcher is None:
            self.frontier = self.position
            return min([text.end(self.position), *cuts]) if cuts else text.end(self.position)
        limit = self._reach_last
        for cut in cuts:
            # If a stop string completes, the answer ends at `cut`: a word term ending right there would
            # match (and roll back) in that text.
            limit = min(limit, self._probe_cut(cut)[0])
        clean = limit
        if clean != len(self._tokens):  # else clean: limit <= the last reach <= the position
            reach = self._reach
            while reach.get(clean, clean) != clean:
                clean -= 1
        self.frontier = clean
        return min([text.end(clean), *cuts]) if cuts else text.end(clean)

    def _probe_cut(self, cut: int) -> tuple[int, Hit | None, Escalation | None]:
        """If the answer ended at byte ``cut``: the releasable count of that text (whole tokens), the
        match at its end, if any, and the escalation that reported it (``None``: the lists' matcher). The
        matchers are left as they were; an escalation that begins after the token holding ``cut`` does not
        apply to that text.

        The bytes of the token holding ``cut`` up to it are pushed as single-byte tokens (the matcher's
        outcome depends only on the bytes); a hit that begins inside them is reported at that token, since
        only whole tokens can be rolled back. A vocab may lack a single-byte token for some bytes (SmolLM2
        has none for a few control and invalid-UTF-8 bytes): that text cannot be checked, so the token
        holding the cut is treated as a hit (rolled back) rather than emitted unchecked.
        """
        matcher, text = self.matcher, self.text
        assert matcher is not None, "only probed while guarding (see _release_limit)"
        whole = text.token_at(cut)
        tail = self._tokens[whole:]
        singles = byte_tokens(self.vocab)
        piece = bytes(text.data[text.end(whole):cut])
        checkable = all(b in singles for b in piece)
        tracks: list[tuple[TokenMatcher, int, Escalation | None]] = [(matcher, 0, None)]
        tracks += [(e.matcher, e.start, e) for e in self._escalations if e.start <= whole]
        hit: Hit | None = None if checkable else Hit(UNCHECKED_CUT, "stop", "", whole, tail[0], 0, 0)
        source: Escalation | None = None
        reach = whole
        for track, offset, escalation in tracks:
            track.rollback_to(whole - offset)
            found = None
            if checkable:
                for b in piece:
                    found = track.push(singles[b])
                    if found is not None:
                        break
                if found is None:
                    found = track.finish()
            reach = min(reach, offset + track.releasable())
            track.rollback_to(whole - offset)
            for token in tail:
                track.push(token)
            if found is not None:
                found = escalation.absolute(found) if escalation is not None else found
                if hit is None or found.start_token < hit.start_token:
                    hit, source = found, escalation
        if hit is not None and hit.start_token >= whole:
            hit = replace(hit, start_token=whole, first_token=tail[0])
        return reach, hit, source

