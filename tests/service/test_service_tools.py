"""Tools, the guard's per-choice record and the protocol details of issue 21, driven with the official ``openai``
client (and raw SSE where the client hides the wire) against the real service: SmolLM2 through the bundled
Hermes chat template (its own template ignores tools), the real Redis store."""

from __future__ import annotations

import json

import httpx
import pytest
from helpers.service import CLIENT_KEY, MODEL, PROMPT
from helpers.service_client import GREEDY

pytestmark = pytest.mark.slow

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city name"}},
                   "required": ["city"]}}}
# One worked example first: SmolLM2-135M writes a well-formed call after it (without one its arguments wander off).
ASK_WEATHER = [
    {"role": "user", "content": "What is the weather like in London?"},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "call_0", "type": "function", "function": {
        "name": "get_weather", "arguments": '{"city": "London"}'}}]},
    {"role": "tool", "tool_call_id": "call_0", "content": "Rainy, 12 degrees Celsius."},
    {"role": "assistant", "content": "It is rainy in London, 12 degrees Celsius."},
    {"role": "user", "content": "What is the weather like in Paris?"},
]
FORCED = {"type": "function", "function": {"name": "get_weather"}}
TOOL_REQUEST = {"model": MODEL, "messages": ASK_WEATHER, "tools": [WEATHER], "temperature": 0, "max_tokens": 48}


def sse_chunks(service, body: dict) -> list[str]:
    """The raw ``data:`` payloads of a streamed chat completion (``[DONE]`` included)."""
    with httpx.stream("POST", service.base_url + "/v1/chat/completions", json={**body, "stream": True},
                      headers={"Authorization": f"Bearer {CLIENT_KEY}"}, timeout=120) as response:
        assert response.status_code == 200, response.read()
        return [line.removeprefix("data: ") for line in response.iter_lines() if line.startswith("data: ")]


@pytest.fixture(scope="module")
def forced_call(openai_client):
    """A greedy answer with the tool named in tool_choice (shared: each generation takes seconds here)."""
    return openai_client.chat.completions.create(**TOOL_REQUEST, tool_choice=FORCED)


def test_a_named_tool_choice_answers_with_that_call(forced_call):
    choice = forced_call.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None and choice.message.refusal is None
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather" and call.id.startswith("call_")
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert choice.model_extra["guardrail"] == {"rollbacks": 0, "lists": {}, "filtered_by": None}


def test_streamed_tool_calls_add_up_to_the_same_call(openai_client, forced_call):
    stream = openai_client.chat.completions.create(**TOOL_REQUEST, tool_choice=FORCED, stream=True)
    calls: dict[int, dict] = {}
    reasons, content = [], []
    for chunk in stream:
        for choice in chunk.choices:
            content.append(choice.delta.content or "")
            for delta in choice.delta.tool_calls or ():
                call = calls.setdefault(delta.index, {"name": "", "arguments": ""})
                call["name"] += delta.function.name or ""
                call["arguments"] += delta.function.arguments or ""
            if choice.finish_reason is not None:
                reasons.append(choice.finish_reason)
    whole = forced_call.choices[0].message.tool_calls[0].function
    assert reasons == ["tool_calls"] and "".join(content) == ""
    assert list(calls.values()) == [{"name": whole.name, "arguments": whole.arguments}]


def test_the_guard_covers_tool_call_arguments(openai_client, forced_call):
    assert "Paris" in forced_call.choices[0].message.tool_calls[0].function.arguments  # the term banned below
    guarded = openai_client.chat.completions.create(**TOOL_REQUEST, tool_choice=FORCED,
                                                    extra_body={"banned_terms": ["Paris"]}).choices[0]
    generated = guarded.message.tool_calls[0].function.arguments if guarded.message.tool_calls else \
        guarded.message.content
    assert "paris" not in generated.lower()
    record = guarded.model_extra["guardrail"]
    assert record["lists"]["request"] >= 1 and record["rollbacks"] == sum(record["lists"].values())


def test_a_tool_result_in_the_history_is_answered_in_text(openai_client):
    history = [*ASK_WEATHER,
               {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
                   "name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
               {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 24 degrees Celsius."}]
    answer = openai_client.chat.completions.create(**{**TOOL_REQUEST, "messages": history}, tool_choice="none")
    choice = answer.choices[0]
    assert choice.message.tool_calls is None and choice.finish_reason in ("stop", "length")
    assert "24" in choice.message.content or "sunny" in choice.message.content.lower(), choice.message.content


def test_tool_choice_none_shows_no_tools_and_parses_no_calls(openai_client, service):
    from guardrail.prompts import prompt_ids

    runtime = service.runtime
    history = ASK_WEATHER[-1:]
    without_tools = prompt_ids(runtime.tokenizer, messages=history)
    answer = openai_client.chat.completions.create(**{**TOOL_REQUEST, "messages": history}, tool_choice="none")
    assert answer.usage.prompt_tokens == len(without_tools)  # the tools were not rendered
    assert answer.choices[0].message.tool_calls is None and answer.choices[0].message.content


@pytest.mark.parametrize(("body", "param"), [
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "other"}}}, "tool_choice"),
    ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools.0.function.name"),
])
def test_inconsistent_tool_fields_are_a_400_naming_the_field(service, body, param):
    response = service.chat(**body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


def test_a_content_filter_names_the_list_that_caused_it_in_the_choice_and_the_headers(openai_client):
    raw = openai_client.chat.completions.with_raw_response.create(
        **GREEDY, extra_body={"banned_terms": ["Paris"], "max_rollbacks": 0})
    choice = raw.parse().choices[0]
    assert choice.finish_reason == "content_filter"
    assert choice.model_extra["guardrail"] == {"rollbacks": 1, "lists": {}, "filtered_by": "request"}
    assert raw.headers["Guardrail-Filtered-By"] == "request" and raw.headers["Guardrail-Rollbacks"] == "0"


def test_stream_chunks_carry_usage_null_a_fingerprint_and_the_record_on_the_finish(service):
    body = {"model": MODEL, "messages": PROMPT, "temperature": 0, "max_tokens": 24,
            "stream_options": {"include_usage": True}, "banned_terms": ["Paris"]}
    payloads = sse_chunks(service, body)
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    *text_chunks, last = chunks
    assert all(c["usage"] is None for c in text_chunks) and last["usage"]["completion_tokens"] > 0
    assert {c["system_fingerprint"] for c in chunks} == {chunks[0]["system_fingerprint"]}
    assert chunks[0]["system_fingerprint"].startswith("fp_")
    [finish] = [c for c in text_chunks if c["choices"][0]["finish_reason"] is not None]
    assert finish["choices"][0]["guardrail"]["lists"]["request"] == last["usage"]["rollbacks"] >= 1


def test_models_report_the_context_length(openai_client, service):
    [card] = openai_client.models.list().data
    assert card.model_extra["max_model_len"] == service.runtime.context_length > 0


def test_ignored_fields_are_accepted_and_logged_by_name(openai_client, caplog):
    with caplog.at_level("INFO", logger="guardrail.service"):
        answer = openai_client.chat.completions.create(
            **{**GREEDY, "max_tokens": 2}, reasoning_effort="low", metadata={"a": "b"}, store=False, service_tier="auto")
    assert answer.choices[0].finish_reason == "length"
    [record] = [r for r in caplog.records if r.getMessage() == "ignored request fields"]
    assert sorted(record.ignored_fields) == ["metadata", "reasoning_effort", "service_tier", "store"]
