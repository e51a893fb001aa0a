"""The end of every engine's decode loop, written once: cancel, deadline, room, judge, finish, usage.

An engine is a transport: it produces the next token (a forward pass and a pick, a vLLM step, an upstream's
stream) and carries out what a verdict means for its cache (crop, resubmit). Everything that decides whether
and how the text goes on or ends is here, one :class:`DecodeDriver` per request (docs/design.md, "Layers"):

==============  =======================================================================================
cancel          :meth:`DecodeDriver.stop_reason`: the caller's cancel event is set → ``cancelled``
deadline        :meth:`DecodeDriver.stop_reason`: ``params.timeout_s`` seconds since :attr:`started` → ``length``
room            :meth:`DecodeDriver.room`: completion tokens the engine may still produce (``max_tokens`` and
                the context), and ``stop_reason(room=True)``: none left → ``length``
judge           :meth:`DecodeDriver.judge` / :meth:`DecodeDriver.judge_end`: the session's verdict on a token
                or on the engine's own end of text, applied through the engine's
                :class:`~guardrail.guard.verdict.VerdictHandler`
finish, usage   :meth:`DecodeDriver.finish`: ``GuardSession.finish`` with the engine's counters and the wall
                time since :attr:`started`; the :class:`~guardrail.guard.events.Usage` subclass the engine
                reports (``VLLMUsage``, ``RemoteUsage``) built from it
==============  =======================================================================================

Where an engine calls each one is its own loop's business (before each pick, each vLLM step, each upstream
request or streamed token); what they answer is the same on every engine. The order of the checks is the
same everywhere too: cancel before the deadline, both before a pick.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict
from typing import Any

from guardrail.guard.events import Event, Finish, FinishReason, Usage
from guardrail.guard.logprobs import PickLogprobs
from guardrail.guard.session import GuardSession, Step
from guardrail.guard.verdict import StepKind, VerdictHandler, apply_step, judge, judge_end

__all__ = ["DecodeDriver"]


class DecodeDriver:
    """One request's loop end on any engine.

    Args:
        session: the request's guard session (``GuardSession.from_params``); the driver is its only
            caller of :meth:`GuardSession.finish`.
        timeout_s: the request's wall-clock limit in seconds (``SamplingParams.timeout_s``).
        max_tokens: completion tokens at most (``SamplingParams.max_tokens``).
        cancel: set by the caller to end the stream (``None``: never cancelled).
        context_length: prompt + completion tokens the engine holds at most (``None``: not bounded here; the
            embedded engine's service checks it before admission).
        started: ``time.perf_counter()`` the deadline and ``Usage.seconds`` count from (default: now).

    Attributes:
        session, cancel, started: as given.
    """

    __slots__ = ("_context_length", "_max_tokens", "_timeout_s", "cancel", "session", "started")

    def __init__(self, session: GuardSession, *, timeout_s: float, max_tokens: int,
                 cancel: threading.Event | None = None, context_length: int | None = None,
                 started: float | None = None) -> None:
        self.session = session
        self.cancel = cancel
        self.started = time.perf_counter() if started is None else started
        self._timeout_s = timeout_s
        self._max_tokens = max_tokens
        self._context_length = context_length

    # -- cancel, deadline, room ----------------------------------------------------------------------
    def stop_reason(self, *, room: bool = False) -> FinishReason | None:
        """Why the text must end now, or ``None``: ``cancelled`` (the cancel event is set), else ``length``
        (past the deadline, or, with ``room=True``, no :meth:`room` left)."""
        if self.cancel is not None and self.cancel.is_set():
            return "cancelled"
        if time.perf_counter() - self.started > self._timeout_s:
            return "length"
        if room and self.room() <= 0:
            return "length"
        return None

    def room(self) -> int:
        """Completion tokens the engine may still produce from the session's position (may be <= 0):
        ``max_tokens - position``, and at most what the context holds past the prompt."""
        position = self.session.position
        room = self._max_tokens - position
        if self._context_length is not None:
            room = min(room, self._context_length - self.session.prompt_tokens - position)
        return room

    # -- judge -----------------------------------------------------------------------------------------
    def judge(self, token_id: int, handler: VerdictHandler, logprobs: PickLogprobs | None = None) -> StepKind:
        """The engine produced ``token_id`` at the session's position: :func:`guardrail.guard.verdict.judge`.

        Raises:
            RuntimeError: the session already finished.
            ValueError: the session wants logprobs and none were given.
        """
        return judge(self.session, token_id, handler, logprobs)

    def accept(self, token_id: int, logprobs: PickLogprobs | None = None) -> Step:
        """:meth:`judge`'s first half: the session's verdict on ``token_id`` (:meth:`GuardSession.accept`), for
        an engine that runs every row's guard before it acts on any verdict; act on it with :meth:`apply`.

        Raises:
            RuntimeError: the session already finished.
            ValueError: the session wants logprobs and none were given.
        """
        return self.session.accept(token_id, logprobs)

    @staticmethod
    def apply(step: Step, token_id: int, handler: VerdictHandler) -> StepKind:
        """:meth:`judge`'s second half: ``step`` (from :meth:`accept` of ``token_id``) applied through
        ``handler`` (:func:`guardrail.guard.verdict.apply_step`). Returns the step's kind."""
        return apply_step(step, token_id, handler)

    def judge_end(self, handler: VerdictHandler, reason: FinishReason = "length") -> StepKind:
        """The engine ended the text by itself (its own length, an upstream's stop):
        :func:`guardrail.guard.verdict.judge_end`.

        Raises:
            RuntimeError: the session already finished.
        """
        return judge_end(self.session, handler, reason)

    # -- finish, usage ---------------------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        """Whether :meth:`finish` ran (the stream's :class:`Finish` is out)."""
        return self.session.finished

    def finish(self, reason: FinishReason, *, forward_passes: int = 0, reprefills: int = 0, cached_tokens: int = 0,
               draft_tokens: int = 0, accepted_draft_tokens: int = 0, usage: type[Usage] = Usage,
               **extra: Any) -> tuple[Event, ...]:
        """End the stream: :meth:`GuardSession.finish` with the engine's counters and the seconds since
        :attr:`started`; the last :class:`TextDelta` (if any) and the :class:`Finish`.

        Args:
            reason: a verdict's finish reason, or :meth:`stop_reason`'s, or the engine's own
                (``content_filter`` when every candidate was banned).
            forward_passes, reprefills, cached_tokens, draft_tokens, accepted_draft_tokens: see :class:`Usage`.
            usage: the :class:`Usage` subclass the engine reports; ``extra`` are its own fields.

        Raises:
            RuntimeError: called twice.
            TypeError: ``extra`` names a field ``usage`` does not have.
        """
        events = self.session.finish(reason, forward_passes=forward_passes, reprefills=reprefills,
                                     seconds=time.perf_counter() - self.started, cached_tokens=cached_tokens,
                                     draft_tokens=draft_tokens, accepted_draft_tokens=accepted_draft_tokens)
        if usage is Usage and not extra:
            return events
        *rest, last = events
        assert isinstance(last, Finish), "GuardSession.finish ends with the Finish event"
        counted = usage(**asdict(last.usage), **extra)
        return (*rest, Finish(last.reason, last.text, counted, last.token_ids, last.filtered_by))
