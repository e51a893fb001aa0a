"""``/v1/messages`` (Anthropic's Messages API) with the official ``anthropic`` client against the real service:
the answer and its usage, the same text as chat completions, streaming events, the guard on every text delta,
stop reasons (``max_tokens``, ``stop_sequence``, ``refusal``), tools through tool_use / tool_result blocks, and
errors in Anthropic's shape."""

from __future__ import annotations

import json

import anthropic
import httpx
import pytest
from helpers.faults import FAULT_MESSAGE, fail_forward_after
from helpers.service import CLIENT_KEY, MODEL

pytestmark = pytest.mark.slow

QUESTION = "What is the capital of France?"
# anthropic 2.x no longer takes sampling arguments: temperature travels in extra_body (the service reads it).
GREEDY = {"temperature": 0}
ASK = {"model": MODEL, "max_tokens": 24, "messages": [{"role": "user", "content": QUESTION}], "extra_body": GREEDY}
WEATHER = {"name": "get_weather", "description": "Get the current weather in a city.",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string", "description": "The city name"}},
                            "required": ["city"]}}
# One worked example first (as tests/test_service_tools.py does for chat): SmolLM2-135M writes a well-formed call
# after it. Here the example travels as Anthropic's tool_use / tool_result blocks.
ASK_WEATHER = [
    {"role": "user", "content": "What is the weather like in London?"},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_0", "name": "get_weather",
                                       "input": {"city": "London"}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_0",
                                  "content": "Rainy, 12 degrees Celsius."}]},
    {"role": "assistant", "content": "It is rainy in London, 12 degrees Celsius."},
    {"role": "user", "content": "What is the weather like in Paris?"},
]
TOOL_ASK = {"model": MODEL, "max_tokens": 48, "extra_body": GREEDY, "messages": ASK_WEATHER, "tools": [WEATHER],
            "tool_choice": {"type": "tool", "name": "get_weather"}}


@pytest.fixture(scope="module")
def client(service):
    return anthropic.Anthropic(base_url=service.base_url, api_key=CLIENT_KEY, max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def answer(client):
    """The greedy answer to QUESTION (shared: each generation takes seconds here)."""
    return client.messages.create(**ASK)


def events_of(service, ask: dict, **extra) -> list[tuple[str, dict]]:
    """The raw (event name, payload) pairs of a streamed message (``ask`` as given to the client)."""
    body = {**{k: v for k, v in ask.items() if k != "extra_body"}, **ask.get("extra_body", {}), **extra}
    with httpx.stream("POST", service.base_url + "/v1/messages", json={**body, "stream": True},
                      headers={"x-api-key": CLIENT_KEY}, timeout=120) as response:
        assert response.status_code == 200, response.read()
        lines = list(response.iter_lines())
    names = [line.removeprefix("event: ") for line in lines if line.startswith("event: ")]
    payloads = [json.loads(line.removeprefix("data: ")) for line in lines if line.startswith("data: ")]
    assert len(names) == len(payloads) and all(n == p["type"] for n, p in zip(names, payloads))
    return list(zip(names, payloads))


def test_a_message_answers_with_a_text_block_and_usage(answer):
    assert answer.id.startswith("msg_") and answer.type == "message" and answer.role == "assistant"
    assert answer.model == MODEL
    [block] = answer.content
    assert block.type == "text" and "Paris" in block.text
    assert answer.stop_reason in ("end_turn", "max_tokens") and answer.stop_sequence is None
    assert answer.usage.input_tokens > 0 and 0 < answer.usage.output_tokens <= 24
    assert answer.model_extra["guardrail"] == {"rollbacks": 0, "lists": {}, "filtered_by": None}


def test_system_and_text_blocks_give_the_answer_chat_completions_gives(client, openai_client):
    system = "Answer in one short sentence."
    message = client.messages.create(**{**ASK, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "What is the capital "}, {"type": "text",
                                                                                       "text": "of France?"}]}]},
        system=[{"type": "text", "text": system}])
    chat = openai_client.chat.completions.create(model=MODEL, max_tokens=24, temperature=0, messages=[
        {"role": "system", "content": system}, {"role": "user", "content": QUESTION}])
    assert message.content[0].text == chat.choices[0].message.content
    assert message.usage.input_tokens == chat.usage.prompt_tokens
    assert message.usage.output_tokens == chat.usage.completion_tokens


def test_a_streamed_message_sends_anthropics_events_and_the_same_text(client, answer, service):
    with client.messages.stream(**ASK) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == answer.content[0].text == final.content[0].text
    assert (final.stop_reason, final.usage.output_tokens) == (answer.stop_reason, answer.usage.output_tokens)
    names = [name for name, _ in events_of(service, ASK)]
    assert names[:3] == ["message_start", "ping", "content_block_start"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    # ping: also the keep-alive while the guard holds text back (it may come between any two events).
    assert "content_block_delta" in names and set(names[3:-3]) <= {"content_block_delta", "ping"}


def test_a_banned_term_never_reaches_a_text_delta(client, answer, service):
    assert "Paris" in answer.content[0].text  # the term banned below is what the model says unguarded
    events = events_of(service, ASK, banned_terms=["Paris"])
    deltas = [p["delta"]["text"] for name, p in events if name == "content_block_delta"]
    assert deltas and not any("paris" in d.lower() for d in deltas) and "paris" not in "".join(deltas).lower()
    [finish] = [p for name, p in events if name == "message_delta"]
    assert finish["guardrail"]["lists"]["request"] >= 1 and finish["usage"]["rollbacks"] >= 1
    raw = client.messages.with_raw_response.create(**{**ASK, "extra_body": {**GREEDY, "banned_terms": ["Paris"]}})
    message = raw.parse()
    assert "paris" not in message.content[0].text.lower()
    assert raw.headers["Guardrail-Rollbacks"] == f"request={message.model_extra['guardrail']['lists']['request']}"


def test_the_stop_reasons_max_tokens_stop_sequence_and_refusal(client, answer):
    cut = client.messages.create(**{**ASK, "max_tokens": 2})
    assert (cut.stop_reason, cut.usage.output_tokens) == ("max_tokens", 2)
    text = answer.content[0].text
    stopped = client.messages.create(**ASK, stop_sequences=["zzz", "Paris"])
    assert (stopped.stop_reason, stopped.stop_sequence) == ("stop_sequence", "Paris")
    assert stopped.content[0].text == text[:text.index("Paris")]
    # No rollback allowed: the first banned term ends the answer before it (content_filter -> refusal).
    refused = client.messages.create(**{**ASK, "extra_body": {**GREEDY, "banned_terms": ["Paris"], "max_rollbacks": 0}})
    assert refused.stop_reason == "refusal" and refused.model_extra["guardrail"]["filtered_by"] == "request"
    assert "paris" not in refused.content[0].text.lower()


def test_a_forced_tool_use_answers_with_a_tool_use_block_streamed_or_not(client):
    message = client.messages.create(**TOOL_ASK)
    assert message.stop_reason == "tool_use"
    [call] = [b for b in message.content if b.type == "tool_use"]
    assert call.name == "get_weather" and call.id.startswith("toolu_") and call.input == {"city": "Paris"}
    with client.messages.stream(**TOOL_ASK) as stream:
        final = stream.get_final_message()
    [streamed] = [b for b in final.content if b.type == "tool_use"]
    assert (final.stop_reason, streamed.name, streamed.input) == ("tool_use", "get_weather", {"city": "Paris"})


def test_errors_are_in_anthropics_shape_and_name_the_field(client, service):
    with pytest.raises(anthropic.NotFoundError) as unknown:
        client.messages.create(**{**ASK, "model": "not-served"})
    assert unknown.value.body["error"]["type"] == "not_found_error" and unknown.value.body["error"]["param"] == "model"
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(**{**ASK, "messages": [{"role": "user", "content": [image]}]})
    assert refused.value.body["type"] == "error" and refused.value.body["error"]["type"] == "invalid_request_error"
    assert refused.value.body["error"]["param"].startswith("messages.0.content")
    missing = service.post("/v1/messages", json={"model": MODEL, "messages": ASK["messages"]},
                           headers={"x-api-key": CLIENT_KEY})
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "max_tokens"
    with pytest.raises(anthropic.BadRequestError) as no_tools:
        client.messages.create(**ASK, tool_choice={"type": "any"})
    assert no_tools.value.body["error"]["param"] == "tool_choice"
    with pytest.raises(anthropic.AuthenticationError) as unauthenticated:
        anthropic.Anthropic(base_url=service.base_url, api_key="wrong", max_retries=0).messages.create(**ASK)
    assert unauthenticated.value.body["error"]["type"] == "authentication_error"


def test_a_failure_mid_stream_ends_with_an_error_event(service, monkeypatch):
    fail_forward_after(monkeypatch, service.runtime.model, 6)
    events = events_of(service, {**ASK, "max_tokens": 400,
                                 "messages": [{"role": "user", "content": "Write a long story about a dragon."}]})
    name, error = events[-1]
    assert name == "error" and error["error"]["type"] == "api_error"
    assert FAULT_MESSAGE not in error["error"]["message"]  # internals stay in the log
    assert any(p["delta"].get("text") for n, p in events[:-1] if n == "content_block_delta")  # it was mid-stream
    assert "message_stop" not in [n for n, _ in events]


def test_a_body_that_is_not_json_is_answered_in_anthropics_shape(service):
    # FastAPI refuses it before validation (found by the schema test's fuzzing): still Anthropic's error body.
    response = httpx.post(f"{service.base_url}/v1/messages", content=b'{"model": "smollm2", "messages": [',
                          headers={"content-type": "application/json", "x-api-key": CLIENT_KEY}, timeout=60)
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error", body
    assert set(body["error"]) == {"message", "type", "param"}
