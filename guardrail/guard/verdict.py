"""The one place where a guard verdict becomes an engine action: keep, roll back, or finish.

Every rollback engine — the transformers single-stream decoder and its batched rows
(:mod:`guardrail.engines.transformers.decoder`), the vLLM driver (:mod:`guardrail.engines.vllm.driver`), the
upstream gateway (:mod:`guardrail.engines.remote.engine`) and any engine written later — hands each picked or
streamed token to :func:`judge` and implements :class:`VerdictHandler`; what a verdict means for the KV cache
is the handler's business, what the verdict is and which events reach the client is decided here and in
:class:`~guardrail.guard.session.GuardSession` only (docs/design.md, "The decode step").

Contract of :func:`judge` (and :func:`judge_end`), in this order, exactly once per call:

1. ``handler.emit(events)`` with the step's :class:`~guardrail.guard.events.TextDelta` and
   :class:`~guardrail.guard.events.Rollback` events (possibly empty) — final text, forward it as is;
2. one of
   ``handler.on_keep(token_id, position)``: ``token_id`` was kept as completion token ``position - 1``;
   the engine needs the logits of completion position ``position`` next (a forward pass, a verified draft,
   or the upstream's next token);
   ``handler.on_rollback(position)``: the session went back to ``position`` completion tokens (its bans
   are set); the engine drops every KV-cache column and kept logits after ``prompt + position`` tokens
   and picks again at ``position`` (from kept logits, or by resubmitting ``prompt + session.token_ids``
   with ``session.bans.banned(position)`` masked, as vLLM and a gateway do);
   ``handler.on_finish(reason)``: the text ends; the handler calls
   :meth:`GuardSession.finish` (with its counters) and forwards what it returns. Not called for a finish
   the engine decides itself (cancel, timeout, every candidate banned): the engine calls
   ``session.finish`` directly then;
3. returns the step's kind (:data:`KEEP`, :data:`ROLLBACK` or :data:`FINISH`), so that a loop knows
   whether to go on.

The handler's methods must not call :func:`judge` again (one verdict at a time).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from guardrail.guard.events import Event, FinishReason
from guardrail.guard.logprobs import PickLogprobs
from guardrail.guard.session import FINISH, KEEP, ROLLBACK, GuardSession, Step, StepKind

__all__ = ["FINISH", "KEEP", "ROLLBACK", "StepKind", "VerdictHandler", "apply_step", "judge", "judge_end"]


class VerdictHandler(Protocol):
    """What an engine does with the guard's verdicts (see the module docstring for the contract)."""

    def emit(self, events: Sequence[Event]) -> None:
        """Forward ``events`` (:class:`TextDelta`, :class:`Rollback`; may be empty) to the client, in order."""

    def on_keep(self, token_id: int, position: int) -> None:
        """``token_id`` was kept; ``position`` completion tokens are kept now: get the logits of ``position``."""

    def on_rollback(self, position: int) -> None:
        """The session went back to ``position`` completion tokens: drop the cache past ``prompt + position``."""

    def on_finish(self, reason: FinishReason) -> None:
        """The text ends with ``reason``: call ``session.finish(reason, ...)`` and forward its events."""


def apply_step(step: Step, token_id: int | None, handler: VerdictHandler) -> StepKind:
    """Dispatch one :class:`~guardrail.guard.session.Step` to ``handler`` (the module's contract).

    Args:
        step: what :meth:`GuardSession.accept` or :meth:`GuardSession.end_of_text` returned.
        token_id: the token the step judged (``None`` for ``end_of_text``, which never keeps one).

    Raises:
        ValueError: a ``keep`` step without its token id.
    """
    handler.emit(step.events)
    if step.kind == KEEP:
        if token_id is None:
            raise ValueError("a keep step needs the token id it kept")
        handler.on_keep(token_id, step.position)
    elif step.kind == ROLLBACK:
        handler.on_rollback(step.position)
    else:
        assert step.finish_reason is not None, "a finish step carries its reason"
        handler.on_finish(step.finish_reason)
    return step.kind


def judge(session: GuardSession, token_id: int, handler: VerdictHandler,
          logprobs: PickLogprobs | None = None) -> StepKind:
    """The engine picked (or its upstream streamed) ``token_id`` at ``session.position``: ask the session
    (:meth:`GuardSession.accept`, with the pick's ``logprobs`` when the request asked for them) and act
    through ``handler``. Returns the step's kind.

    Raises:
        RuntimeError: the session already finished, or is driven mask-only.
        ValueError: the session wants logprobs and none were given.
    """
    return apply_step(session.accept(token_id, logprobs), token_id, handler)


def judge_end(session: GuardSession, handler: VerdictHandler, reason: FinishReason = "length") -> StepKind:
    """The engine ended the text by itself here (its own length limit, an upstream that stopped): the
    end-of-text rule applies (:meth:`GuardSession.end_of_text`; a ``word`` term pending at the very end rolls
    back). Returns :data:`ROLLBACK` or :data:`FINISH`.

    Raises:
        RuntimeError: the session already finished, or is driven mask-only.
    """
    return apply_step(session.end_of_text(reason), None, handler)
