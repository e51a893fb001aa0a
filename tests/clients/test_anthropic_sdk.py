"""The ``anthropic`` library on ``/v1/messages``: a named tool streamed as ``input_json_delta`` fragments through
``messages.stream``, ``tool_choice: any``, ``messages.parse`` with ``output_format`` (structured output, streamed
and not) and ``messages.count_tokens``, a banned term in every generating request."""

from __future__ import annotations

import pytest
from helpers.clients import ASK, BANNED, MAX_TOKENS, WEATHER_PARAMETERS, assert_valid_arguments
from helpers.service import CLIENT_KEY
from pydantic import BaseModel

WEATHER = {"name": "get_weather", "description": "Get the current weather in a city.",
           "input_schema": WEATHER_PARAMETERS}
GUARDED = {"max_tokens": MAX_TOKENS, "extra_body": {"banned_terms": BANNED, "temperature": 0}}  # no temperature in 2.14


class City(BaseModel):
    name: str
    country: str


@pytest.fixture(scope="module")
def client(service):
    from anthropic import Anthropic

    return Anthropic(base_url=service.base_url, api_key=CLIENT_KEY, max_retries=0, timeout=600)


def test_a_named_tool_streams_its_input_piece_by_piece(client, model):
    with client.messages.stream(model=model, messages=[{"role": "user", "content": ASK}], tools=[WEATHER],
                                tool_choice={"type": "tool", "name": "get_weather"}, **GUARDED) as stream:
        events = list(stream)
        message = stream.get_final_message()
    fragments = [e.delta.partial_json for e in events
                 if e.type == "content_block_delta" and e.delta.type == "input_json_delta"]
    assert len(fragments) > 1
    [block] = message.content
    assert block.type == "tool_use" and block.name == "get_weather" and message.stop_reason == "tool_use"
    assert block.input == assert_valid_arguments("".join(fragments))


def test_tool_choice_any_calls_a_declared_tool(client, model):
    other = {"name": "get_time", "description": "Get the time in a timezone.",
             "input_schema": {"type": "object", "properties": {"timezone": {"type": "string"}},
                              "required": ["timezone"]}}
    message = client.messages.create(model=model, messages=[{"role": "user", "content": ASK}],
                                     tools=[WEATHER, other], tool_choice={"type": "any"}, **GUARDED)
    calls = [block for block in message.content if block.type == "tool_use"]
    assert calls and message.stop_reason == "tool_use"
    for call in calls:
        assert call.name in ("get_weather", "get_time")
        assert_valid_arguments(call.input, WEATHER_PARAMETERS if call.name == "get_weather" else other["input_schema"])


def test_messages_parse_holds_the_answer_to_the_output_format(client, model):
    message = client.messages.parse(model=model, messages=[{"role": "user", "content": "Name a city as JSON."}],
                                    output_format=City, **GUARDED)
    assert isinstance(message.parsed_output, City)
    with client.messages.stream(model=model, messages=[{"role": "user", "content": "Name a city as JSON."}],
                                output_format=City, **GUARDED) as stream:
        streamed = stream.get_final_message()
    assert streamed.parsed_output == message.parsed_output  # greedy: the same answer


def test_count_tokens_is_the_prompt_a_message_request_takes(client, model):
    request = {"model": model, "messages": [{"role": "user", "content": ASK}], "tools": [WEATHER],
               "system": "Be brief."}
    counted = client.messages.count_tokens(**request)
    message = client.messages.create(**request, max_tokens=1)
    assert counted.input_tokens == message.usage.input_tokens > 0
