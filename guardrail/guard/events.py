"""What a guarded generation yields: text deltas, rollbacks and one final finish (every engine).

A stream is any number of :class:`TextDelta` and :class:`Rollback` events followed by exactly one
:class:`Finish`. Deltas are never retracted: their concatenation is ``Finish.text``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from guardrail.guard.logprobs import TokenLogprob

#: ``stop``: EOS or a stop string; ``length``: ``max_tokens`` or the wall-clock limit; ``content_filter``:
#: the rollback budget ran out or every candidate token was banned (OpenAI's value); ``cancelled``: the
#: caller set the cancel event (the client went away).
FinishReason = Literal["stop", "length", "content_filter", "cancelled"]


@dataclass(frozen=True)
class TextDelta:
    """Text released to the client; no banned term can still begin inside it.

    Attributes:
        text: the released text (may be empty when only ``logprobs`` are released: a token whose bytes end
            inside a character).
        logprobs: when the request asked for logprobs, the records of the tokens this delta finishes
            releasing, in order (:mod:`guardrail.guard.logprobs`: a record travels with the delta that
            releases its token's last byte); empty otherwise.
    """

    text: str
    logprobs: tuple[TokenLogprob, ...] = ()


@dataclass(frozen=True)
class Rollback:
    """A banned term was caught and the decoder went back to where it began.

    Attributes:
        position: index (0-based, among completion tokens) of the token where the term began; decoding
            resumes there with that token banned.
        list_name: the word list of the term (what logs and metrics may name).
        tokens_discarded: completion tokens dropped (0 when the candidate token itself began the term and
            was simply re-picked).
        escalated: this rollback escalated its term: the evasion guard matches it as a substring from
            ``position`` on (:mod:`guardrail.guard.escalation`).
        evasion: the hit was an escalated term's form (glued, joined by ``_``) that the term's own match
            mode would have let through.
        term: the term as written in its list (``re:PATTERN`` for a regex term); ``""`` for a stop-string cut
            whose text could not be checked. Confidential: never in logs or metrics; the service streams it
            only to a caller who may read the list (docs/service.md, "Guard events").
        fragment: the text taken back: from the start of the token at ``position`` to the end of the token
            that completed the term (UTF-8 decoded, a split character replaced by U+FFFD); never released to
            the client, as confidential as ``term``.
        offset: characters of the answer kept before ``fragment`` when it was taken back (where the rollback
            happened in the text; at least the characters already released, and a later rollback may go back
            further).
        attempt: rollbacks at ``position`` so far, this one included (2 and up: the re-pick there was rolled
            back again; :attr:`SamplingParams.max_rollbacks_per_position` bounds it).
    """

    position: int
    list_name: str
    tokens_discarded: int
    escalated: bool = False
    evasion: bool = False
    term: str = ""
    fragment: str = ""
    offset: int = 0
    attempt: int = 1


@dataclass(frozen=True)
class Usage:
    """Counters of one generation.

    Attributes:
        prompt_tokens: tokens in the prompt.
        completion_tokens: tokens kept in the answer (rolled-back tokens do not count).
        rollbacks: banned-term hits that made the decoder re-pick (rollbacks and same-position re-picks).
        forward_passes: model forward calls, the prefill and every re-prefill counting one each.
        reprefills: rollbacks that rebuilt the KV cache from scratch because it could not crop.
        seconds: wall time of the generation.
        cached_tokens: prompt tokens served from the engine's prefix cache instead of prefilled (OpenAI's
            ``prompt_tokens_details.cached_tokens``), at most ``prompt_tokens`` on every engine: on vLLM and
            the gateway those of the first submission (a rollback's resubmission reads its prompt from the cache
            again; vLLM's ``VLLMUsage.prefill_tokens`` counts the work of every submission).
        draft_tokens: tokens drafted and verified in a forward pass (speculative decoding).
        accepted_draft_tokens: of those, the ones the decode loop picked (kept without a pass of their own;
            a kept token later rolled back still counts).
        guard_step_seconds: the guard's mean wall time, in seconds, to judge one token
            (:meth:`GuardSession.accept <guardrail.guard.session.GuardSession.accept>`), measured on a sample of
            the steps (the second, then one in :data:`~guardrail.guard.session.GUARD_TIMING_EVERY`) so that
            timing costs nothing measurable; ``None`` when fewer than two tokens were judged.
    """

    prompt_tokens: int
    completion_tokens: int
    rollbacks: int
    forward_passes: int
    reprefills: int
    seconds: float
    cached_tokens: int = 0
    draft_tokens: int = 0
    accepted_draft_tokens: int = 0
    guard_step_seconds: float | None = None


@dataclass(frozen=True)
class Finish:
    """The last event of a stream.

    Attributes:
        reason: see :data:`FinishReason`.
        text: the whole answer (equal to the concatenated :class:`TextDelta` texts).
        usage: counters of the generation.
        token_ids: the kept completion token ids (after a stop string, the last one may reach into it);
            what the watermark detector scores.
        filtered_by: with ``content_filter`` because the rollback budget ran out, the word list of the term
            the answer was cut before (a name, never the term); ``None`` otherwise (also when every
            candidate token was banned: several lists may have banned them).
    """

    reason: FinishReason
    text: str
    usage: Usage
    token_ids: tuple[int, ...] = ()
    filtered_by: str | None = None


Event = TextDelta | Rollback | Finish


@dataclass(frozen=True)
class Completion:
    """A whole guarded generation (a stream collected).

    Attributes:
        text: the answer (no banned term, no stop string).
        finish_reason: see :data:`FinishReason`.
        usage: token, rollback and forward-pass counters.
        rollbacks: every rollback, in order.
        token_ids: the kept completion token ids (:attr:`Finish.token_ids`).
    """

    text: str
    finish_reason: FinishReason
    usage: Usage
    rollbacks: tuple[Rollback, ...]
    token_ids: tuple[int, ...] = ()

    @classmethod
    def from_events(cls, events: Iterable[Event]) -> Completion:
        """Collect a stream.

        Raises:
            ValueError: the stream ended without a :class:`Finish` event.
        """
        rollbacks: list[Rollback] = []
        for event in events:
            if isinstance(event, Rollback):
                rollbacks.append(event)
            elif isinstance(event, Finish):
                return cls(event.text, event.reason, event.usage, tuple(rollbacks), event.token_ids)
        raise ValueError("the stream ended without a Finish event")
