"""Tool calls without a model: the parsers, the streamed split of content and calls, the bundled Hermes chat
template through the real SmolLM2 tokenizer, which template a tool request gets, the chat request's tool fields,
and the SSE keep-alive."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from guardrail.prompts import load_chat_template, prompt_ids, renders_tools
from service.chat_prompt import chat_template_for
from service.errors import ApiError
from service.generation import with_keepalive
from service.schemas.generation import ChatCompletionRequest
from service.settings import Settings
from service.tool_calls import HermesParser, JsonParser, ToolCallStream, parse_answer

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city.",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}
HERMES_ANSWER = 'Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def test_hermes_blocks_are_calls_and_the_text_before_them_is_content():
    content, calls = parse_answer(HermesParser(), HERMES_ANSWER + '\n<tool_call>{"name": "f", "arguments": {}}'
                                  '</tool_call>')
    assert content == "Let me look.\n"
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("get_weather", {"city": "Paris"}), ("f", {})]
    assert calls[0].id != calls[1].id and calls[0].id.startswith("call_")


@pytest.mark.parametrize("text", ["Paris is sunny.", "<tool_call>not json</tool_call>",
                                  '<tool_call>{"arguments": {}}</tool_call>'])
def test_an_answer_without_a_valid_call_is_all_content(text):
    assert parse_answer(HermesParser(), text) == (text, [])


def test_an_unclosed_hermes_call_is_read_as_far_as_its_json_goes():
    content, calls = parse_answer(HermesParser(), '<tool_call>\n{"name": "get_weather", "arguments": '
                                  '{"city": "Rome"}}\nmore')
    assert content is None
    assert [(c.name, c.arguments) for c in calls] == [("get_weather", '{"city": "Rome"}')]


def test_arguments_in_the_template_layout_keep_their_text_and_others_are_reserialized():
    _, [kept] = parse_answer(HermesParser(), '<tool_call>{"name": "f", "arguments": {"a":1,  "b": "\\u00e9"}}'
                             '</tool_call>')
    assert kept.arguments == '{"a":1,  "b": "\\u00e9"}'  # what the model wrote (OpenAI's arguments string)
    _, [moved] = parse_answer(HermesParser(), '<tool_call>{"arguments": {"a":1}, "name": "f"}</tool_call>')
    assert moved.arguments == '{"a": 1}'


def test_json_calls_take_arguments_or_parameters_and_lists():
    content, calls = parse_answer(JsonParser(), ' [{"name": "a", "parameters": {"x": 1}}, '
                                  '{"name": "b", "arguments": "{\\"y\\": 2}"}]')
    assert content is None
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("a", {"x": 1}), ("b", {"y": 2})]
    assert parse_answer(JsonParser(), '{"answer": 42}') == ('{"answer": 42}', [])


def _streamed(stream: ToolCallStream, answer: str, size: int = 5) -> tuple[str, list]:
    """Feed ``answer`` in slices of ``size`` characters; the content sent and the call pieces, in order."""
    sent, pieces = [], []
    for at in range(0, len(answer), size):
        content, new = stream.feed(answer[at:at + size])
        sent.append(content)
        pieces += new
    content, new = stream.finish()
    return "".join(sent) + content, pieces + new


def test_a_stream_sends_content_until_a_call_begins_then_the_name_then_the_arguments_piece_by_piece():
    stream = ToolCallStream(HermesParser())
    content, pieces = _streamed(stream, HERMES_ANSWER)
    assert content == "Let me look.\n"
    assert pieces[0].first and pieces[0].name == "get_weather" and pieces[0].arguments.startswith("{")
    fragments = [p.arguments for p in pieces]
    assert len([f for f in fragments if f]) > 3  # fragment by fragment, not the whole object at once
    assert "".join(fragments) == '{"city": "Paris"}' == pieces[-1].done.arguments
    assert {p.id for p in pieces} == {stream.calls[0].id} and [p.done is not None for p in pieces].count(True) == 1
    assert stream.feed("")[1] == []  # nothing is sent twice


def test_a_streamed_call_never_sends_the_closing_brace_of_the_outer_object_or_the_tag():
    stream = ToolCallStream(HermesParser())
    head = '<tool_call>\n{"name": "f", "arguments": {"s": "}]\\"{"}'
    _, pieces = stream.feed(head)
    assert "".join(p.arguments for p in pieces) == '{"s": "}]\\"{"}'  # braces inside strings do not close it
    _, more = stream.feed("}\n</tool_call>")
    assert [(p.arguments, p.done is not None) for p in more] == [("", True)]


def test_a_second_call_is_not_streamed_past_the_limit():
    answer = HERMES_ANSWER + "\n" + HERMES_ANSWER.removeprefix("Let me look.\n").replace("Paris", "Rome")
    _, pieces = _streamed(ToolCallStream(HermesParser(), limit=1), answer)
    assert {p.index for p in pieces} == {0} and "Rome" not in "".join(p.arguments for p in pieces)
    _, both = _streamed(ToolCallStream(HermesParser()), answer)
    assert [p.done.arguments for p in both if p.done] == ['{"city": "Paris"}', '{"city": "Rome"}']


def test_the_closing_tag_inside_a_string_argument_does_not_end_the_call():
    answer = '<tool_call>\n{"name": "reply", "arguments": {"text": "end with </tool_call> here"}}\n</tool_call>'
    _, [call] = parse_answer(HermesParser(), answer)
    assert json.loads(call.arguments) == {"text": "end with </tool_call> here"}
    _, pieces = _streamed(ToolCallStream(HermesParser()), answer, size=4)
    assert "".join(p.arguments for p in pieces) == call.arguments and pieces[-1].done is not None


def test_a_call_cut_inside_its_arguments_is_not_sent_again_as_content():
    stream = ToolCallStream(HermesParser())
    content, pieces = stream.feed('Sure.\n<tool_call>\n{"name": "f", "arguments": {"s": "abc')
    assert content == "Sure.\n" and pieces[0].first
    assert stream.finish() == ("", [])  # max_tokens cut it: finish_reason says so, nothing is re-sent
    content, [cut] = parse_answer(HermesParser(), stream.text)  # the whole answer reads the same
    assert content == "Sure.\n" and (cut.name, cut.arguments) == ("f", '{"s": "abc')


def test_a_call_in_another_layout_is_sent_whole_once_complete():
    answer = '<tool_call>{"arguments": {"x": 1}, "name": "f"}</tool_call>'
    _, pieces = _streamed(ToolCallStream(HermesParser()), answer, size=3)
    [piece] = pieces
    assert piece.first and piece.done is not None and piece.arguments == '{"x": 1}' == piece.done.arguments


def test_a_possible_tag_is_held_back_until_the_text_decides():
    stream = ToolCallStream(HermesParser())
    assert stream.feed("a <tool") == ("a ", [])
    assert stream.feed("box> b <tool_c") == ("<toolbox> b ", [])
    assert stream.finish() == ("<tool_c", [])  # the answer ended: no call after all


def test_a_json_answer_is_held_back_then_released_as_content_when_it_is_no_call():
    stream = ToolCallStream(JsonParser())
    assert stream.feed('  {"answer"') == ("", [])
    assert stream.feed(": 42}") == ("", [])
    assert stream.finish() == ('  {"answer": 42}', [])


def test_the_bundled_hermes_template_renders_tools_calls_and_responses(smollm2_tokenizer):
    template = load_chat_template("hermes")
    assert renders_tools(template) and not renders_tools(smollm2_tokenizer.chat_template)
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny, 21 C"},
    ]
    ids = prompt_ids(smollm2_tokenizer, messages=messages, tools=[WEATHER], chat_template=template)
    text = smollm2_tokenizer.decode(ids)
    assert '"name": "get_weather", "description": "Current weather in a city."' in text
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in text
    assert "<|im_start|>user\n<tool_response>\nsunny, 21 C\n</tool_response><|im_end|>" in text
    assert text.endswith("<|im_start|>assistant\n")


def test_an_assistant_prefix_is_appended_to_the_prompt(smollm2_tokenizer):
    plain = prompt_ids(smollm2_tokenizer, messages=[{"role": "user", "content": "hi"}])
    forced = prompt_ids(smollm2_tokenizer, messages=[{"role": "user", "content": "hi"}], assistant_prefix="<tool_call>")
    assert forced[:len(plain)] == plain
    assert smollm2_tokenizer.decode(forced[len(plain):]) == "<tool_call>"


def test_chat_templates_load_by_name_file_or_text(tmp_path):
    path = tmp_path / "t.jinja"
    path.write_text("{{ messages }}")
    assert load_chat_template(str(path)) == "{{ messages }}"
    assert load_chat_template("{% for m in messages %}{% endfor %}").startswith("{%")
    with pytest.raises(ValueError, match="neither a bundled name"):
        load_chat_template("no-such-template")


def test_chat_requests_accept_tool_fields_and_name_the_ignored_ones():
    body = ChatCompletionRequest.model_validate({
        "model": "m", "tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "parallel_tool_calls": False, "reasoning_effort": "low", "metadata": {"a": "b"}, "store": False,
        "messages": [{"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"}],
    })
    assert body.tools is not None and body.tools[0].function.name == "get_weather"
    assert body.messages[1].role == "tool" and body.messages[0].tool_calls is not None
    assert body.unsupported_field() is None
    assert sorted(body.ignored_fields()) == ["metadata", "reasoning_effort", "store"]


def test_tools_use_the_hermes_template_on_chatml_models_and_are_a_400_where_none_renders_them(
        smollm2_tokenizer, gemma3_tokenizer):
    # The route reads only these two attributes of the runtime; a real one would load the model.
    smollm2 = SimpleNamespace(settings=Settings(chat_template=None), tokenizer=smollm2_tokenizer)
    assert chat_template_for(smollm2, with_tools=True) == load_chat_template("hermes")
    assert chat_template_for(smollm2, with_tools=False) is None  # the tokenizer's own
    base = SimpleNamespace(settings=Settings(chat_template=None), tokenizer=gemma3_tokenizer)
    with pytest.raises(ApiError) as refused:
        chat_template_for(base, with_tools=True)
    assert (refused.value.status, refused.value.param) == (400, "tools")
    configured = SimpleNamespace(settings=Settings(chat_template="hermes"), tokenizer=gemma3_tokenizer)
    assert chat_template_for(configured, with_tools=True) == load_chat_template("hermes")


def test_a_bad_chat_template_setting_is_refused_naming_it():
    with pytest.raises(ValidationError, match="chat_template"):
        Settings(chat_template="no-such-template")


async def _collect(items: AsyncIterator[object], interval_s: float, gate: asyncio.Event) -> list[object]:
    seen = []
    async for item in with_keepalive(items, interval_s):
        seen.append(item)
        gate.set()  # the first keep-alive (if any) opens the gate
    return seen


def test_keepalive_marks_silences_and_loses_no_event():
    async def run(interval_s: float) -> list[object]:
        gate = asyncio.Event()

        async def events() -> AsyncIterator[object]:
            await gate.wait()
            yield "a"
            yield "b"

        if interval_s == 0:
            gate.set()
        return await _collect(events(), interval_s, gate)

    silent = asyncio.run(run(0.01))
    assert silent[0] is None and [item for item in silent if item is not None] == ["a", "b"]
    assert asyncio.run(run(0)) == ["a", "b"]
