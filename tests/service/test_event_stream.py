"""``service.event_stream.answer_items``: one choice's decoder events read into the neutral items that
``/v1/messages`` and ``/v1/responses`` frame as their own SSE (keep-alives, content and calls, the finish with
the guard's record)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from guardrail.guard.events import Event, Finish, Rollback, TextDelta, Usage
from service.event_stream import AnswerItem, Finished, KeepAlive, Output, answer_items
from service.tool_calls import HermesParser, JsonParser
from service.tool_choice import ToolUse
from service.worker import ChoiceEvent

CALL = '<tool_call>\n{{"name": "get_weather", "arguments": {{"city": "{}"}}}}\n</tool_call>'


def _finish(text: str, rollbacks: int = 0, reason: str = "stop") -> Finish:
    usage = Usage(prompt_tokens=5, completion_tokens=3, rollbacks=rollbacks, forward_passes=4, reprefills=0,
                  seconds=0.1)
    return Finish(reason, text, usage)  # type: ignore[arg-type]


def _items(events: list[Event], tools: ToolUse | None = None) -> tuple[list[AnswerItem], int]:
    """The items of ``events`` (no keep-alives) and how many times ``first_text`` was called."""
    calls = 0

    def first_text() -> None:
        nonlocal calls
        calls += 1

    async def rest() -> AsyncIterator[ChoiceEvent]:
        for event in events[1:]:
            yield ChoiceEvent(0, event)

    async def run() -> list[AnswerItem]:
        return [item async for item in answer_items(ChoiceEvent(0, events[0]), rest(), tools, 0, first_text)]

    return asyncio.run(run()), calls


def test_released_text_is_output_and_a_rollback_lands_in_the_finish_record():
    finish = _finish("Hello world", rollbacks=1)
    items, first_text = _items([TextDelta("Hello "), Rollback(1, "request", 1), TextDelta(""),
                                TextDelta("world"), finish])
    assert items[:2] == [Output("Hello ", []), Output("world", [])]
    [done] = [item for item in items[2:] if isinstance(item, Finished)]
    assert len(items) == 3 and done.calls == 0 and done.result.finish is finish
    assert done.result.guardrail == {"rollbacks": 1, "lists": {"request": 1}, "filtered_by": None}
    assert first_text == 1  # once, before the first output


def test_calls_are_told_from_content_and_cut_to_one_when_single():
    answer = "Let me look.\n" + CALL.format("Paris") + "\n" + CALL.format("Rome")
    items, first_text = _items([TextDelta("Let me look.\n"), TextDelta(answer.removeprefix("Let me look.\n")),
                                _finish(answer)], ToolUse(HermesParser(), single=True))
    outputs = [item for item in items if isinstance(item, Output)]
    assert "".join(o.text for o in outputs) == "Let me look.\n"
    [call] = [piece.done for o in outputs for piece in o.pieces if piece.done is not None]
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
    assert {piece.index for o in outputs for piece in o.pieces} == {0}
    assert isinstance(items[-1], Finished) and items[-1].calls == 1 and first_text == 1


def test_text_held_back_until_the_finish_is_flushed_without_counting_as_first_text():
    # A JSON-call parser holds an answer that begins with "{" until it knows whether it is a call.
    items, first_text = _items([TextDelta("{not a call"), _finish("{not a call")], ToolUse(JsonParser()))
    assert items[0] == Output("{not a call", []) and isinstance(items[1], Finished) and len(items) == 2
    assert first_text == 0  # the time to first token is that of a text delta's release, as before the flush


def test_an_idle_stream_yields_keepalives_and_loses_no_event():
    async def run() -> list[AnswerItem]:
        gate = asyncio.Event()

        async def rest() -> AsyncIterator[ChoiceEvent]:
            await gate.wait()  # silent until a keep-alive was seen: one must come
            yield ChoiceEvent(0, _finish("a"))

        seen: list[AnswerItem] = []
        async for item in answer_items(ChoiceEvent(0, TextDelta("a")), rest(), None, 0.01, lambda: None):
            seen.append(item)
            if isinstance(item, KeepAlive):
                gate.set()
        return seen

    seen = asyncio.run(run())
    assert seen[0] == Output("a", []) and isinstance(seen[1], KeepAlive) and isinstance(seen[-1], Finished)
    assert [item for item in seen if not isinstance(item, KeepAlive)][1:] == [seen[-1]]
