"""The ``openai`` library: chat completions' tool calls (a named function, ``required`` with parallel calls offered,
streamed piece by piece) and the Responses API's (a named function streamed as ``function_call_arguments`` deltas,
``responses.parse`` with ``text_format``), a banned term in every request."""

from __future__ import annotations

import json

import pytest
from helpers.clients import ASK, BANNED, MAX_TOKENS, WEATHER_PARAMETERS, assert_valid_arguments
from helpers.service import CLIENT_KEY
from pydantic import BaseModel

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city.",
                                            "parameters": WEATHER_PARAMETERS}}
TIME_PARAMETERS = {"type": "object", "properties": {"timezone": {"type": "string", "enum": ["UTC", "CET", "PST"]}},
                   "required": ["timezone"]}
TIME = {"type": "function", "function": {"name": "get_time", "description": "Get the time in a timezone.",
                                         "parameters": TIME_PARAMETERS}}
GUARDED = {"temperature": 0, "max_tokens": MAX_TOKENS, "extra_body": {"banned_terms": BANNED}}


class City(BaseModel):
    name: str
    country: str


@pytest.fixture(scope="module")
def client(base_url):
    from openai import OpenAI

    return OpenAI(base_url=base_url, api_key=CLIENT_KEY, max_retries=0, timeout=600)


def test_a_named_tool_choice_is_that_call_with_arguments_that_follow_its_schema(client, model):
    answer = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": ASK}], tools=[WEATHER, TIME],
        tool_choice={"type": "function", "function": {"name": "get_weather"}}, **GUARDED)
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    [call] = choice.message.tool_calls
    assert call.function.name == "get_weather"
    assert_valid_arguments(call.function.arguments)


def test_required_streams_a_declared_call_name_first_then_argument_fragments(client, model):
    stream = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "What time is it in Berlin?"}], tools=[WEATHER, TIME],
        tool_choice="required", stream=True, **GUARDED)
    deltas = [delta for chunk in stream for choice in chunk.choices for delta in choice.delta.tool_calls or ()]
    first = deltas[0]
    assert first.id and first.function.name in ("get_weather", "get_time")
    pieces = [d for d in deltas if d.index == first.index]
    assert all(d.function.name is None and d.id is None for d in pieces[1:])  # the name is sent once, first
    fragments = [d.function.arguments for d in pieces if d.function.arguments]
    assert len(fragments) > 1  # piece by piece, not one whole delta
    schema = WEATHER_PARAMETERS if first.function.name == "get_weather" else TIME_PARAMETERS
    assert_valid_arguments("".join(fragments), schema)


def test_the_responses_api_streams_a_named_call_as_argument_deltas(client, model):
    tool = {"type": "function", "name": "get_weather", "description": "Get the current weather in a city.",
            "parameters": WEATHER_PARAMETERS, "strict": True}
    events = list(client.responses.create(
        model=model, input=ASK, tools=[tool], tool_choice={"type": "function", "name": "get_weather"}, stream=True,
        temperature=0, max_output_tokens=MAX_TOKENS, extra_body={"banned_terms": BANNED}))
    kinds = [e.type for e in events]
    assert kinds[2] == "response.output_item.added" and events[2].item.type == "function_call"
    deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    [done] = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert len(deltas) > 1 and "".join(deltas) == done.arguments
    [item] = events[-1].response.output
    assert item.type == "function_call" and item.name == "get_weather" and item.arguments == done.arguments
    assert_valid_arguments(item.arguments)


def test_responses_parse_holds_the_answer_to_the_text_format(client, model):
    response = client.responses.parse(model=model, input="Name a large city and its country, as JSON.",
                                      text_format=City, temperature=0, max_output_tokens=MAX_TOKENS,
                                      extra_body={"banned_terms": BANNED})
    assert isinstance(response.output_parsed, City)
    assert response.text.format.type == "json_schema"
    assert "paris" not in response.output_text.lower()


def test_chat_parse_streams_a_structured_answer(client, model):
    with client.chat.completions.stream(model=model, messages=[{"role": "user", "content": "Name a city as JSON."}],
                                        response_format=City, **GUARDED) as stream:
        final = stream.get_final_completion()
    parsed = final.choices[0].message.parsed
    assert isinstance(parsed, City) and json.loads(final.choices[0].message.content) == parsed.model_dump()
