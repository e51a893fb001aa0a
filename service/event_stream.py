"""One streamed answer (a single choice) read into API-neutral items, for the routes that frame their own Server-Sent
Events (``/v1/messages``, ``/v1/responses``): keep-alives while the guard holds text back, released content and
the pieces of tool calls as the tool-call stream tells them apart (a call's name first, then its arguments
fragment by fragment, released under the same hold-back as text), and the finish with the guard's record.

Chat and text completions stream through :func:`service.generation.respond`'s default writer instead: it serves
``n`` choices at once and carries logprobs, which these two APIs do not have.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from guardrail.guard.events import Finish, Rollback, TextDelta
from service.generation import ChoiceResult, GuardRecord, ResponseIdentity, prepend, with_keepalive
from service.tool_calls import ToolCallPiece, ToolCallStream
from service.tool_choice import ToolUse
from service.worker import ChoiceEvent


@dataclass(frozen=True)
class KeepAlive:
    """Nothing to send for the keep-alive interval: the route sends its API's idle event."""


@dataclass(frozen=True)
class Output:
    """Content to send and the pieces of tool calls that came with it (at least one of the two).

    Attributes:
        text: content released by the guard and, with tools, not part of a call.
        pieces: the calls' new pieces, in order, already cut to the request's limit (``ToolUse.single``).
    """

    text: str
    pieces: list[ToolCallPiece]


@dataclass(frozen=True)
class Finished:
    """The answer ended (the last item).

    Attributes:
        result: the finish and the guard's record of the answer (the ``guardrail`` field).
        calls: how many complete tool calls were sent in all.
    """

    result: ChoiceResult
    calls: int


AnswerItem = KeepAlive | Output | Finished


class OwnStreamShape:
    """The chunk half of a :class:`~service.generation.ResponseShape` for a route that writes its own stream (from
    :func:`answer_items`): :func:`~service.generation.respond` then uses only the shape's ``body`` and ``id_prefix``,
    which the subclass gives."""

    def first_chunk(self, c: ResponseIdentity, index: int) -> None:
        return None

    def delta_chunks(self, c: ResponseIdentity, index: int, text: str) -> list[dict[str, Any]]:
        return []

    def finish_chunks(self, c: ResponseIdentity, index: int, result: ChoiceResult) -> list[dict[str, Any]]:
        return []

    def usage_chunk(self, c: ResponseIdentity, usage: dict[str, Any]) -> dict[str, Any]:
        return {}


async def answer_items(first: ChoiceEvent, events: AsyncIterator[ChoiceEvent], tools: ToolUse | None,
                       keepalive_s: float, first_text: Callable[[], None]) -> AsyncIterator[AnswerItem]:
    """The items of one choice's stream (``first``, then ``events``).

    Args:
        tools: how the answer is read for calls; None: all text is content.
        keepalive_s: a :class:`KeepAlive` whenever this many seconds pass without an event (0: never).
        first_text: called once, just before the first :class:`Output` of a text delta (time to first token). The
            content and calls flushed at the finish do not call it.

    Raises:
        What ``events`` raises (``GenerationFailed``, ``ServerShuttingDown`` …): the route answers it in its shape.
    """
    stream = ToolCallStream(tools.parser, 1 if tools.single else None) if tools is not None else None
    record = GuardRecord()
    sent_text = False

    def output(text: str, pieces: list[ToolCallPiece]) -> Output | None:
        return Output(text, pieces) if text or pieces else None

    async for item in with_keepalive(prepend(first, events), keepalive_s):
        if item is None:
            yield KeepAlive()
        elif isinstance(item.event, TextDelta) and item.event.text:
            released = output(*stream.feed(item.event.text)) if stream is not None else output(item.event.text, [])
            if released is not None:
                if not sent_text:
                    sent_text = True
                    first_text()
                yield released
        elif isinstance(item.event, Rollback):
            record.add(item.event)
        elif isinstance(item.event, Finish):
            rest = output(*stream.finish()) if stream is not None else None
            if rest is not None:
                yield rest
            yield Finished(ChoiceResult(item.event, record.to_dict(item.event)), len(stream.calls) if stream else 0)
