"""``/v1/responses`` (the Responses API, text) with the official ``openai`` client against the real service:
answers, streaming events, the guard, incomplete answers and refused fields."""

from __future__ import annotations

import json

import openai
import pytest
from helpers.service import MODEL
from helpers.service_client import error_of

pytestmark = pytest.mark.slow

ASK = {"model": MODEL, "input": "What is the capital of France?", "temperature": 0, "max_output_tokens": 24}


def test_a_response_answers_in_output_text_with_usage(openai_client):
    response = openai_client.responses.create(**ASK, instructions="Answer in one short sentence.")
    assert response.status == "completed" and response.incomplete_details is None
    assert "Paris" in response.output_text
    [message] = response.output
    assert message.type == "message" and message.role == "assistant"
    usage = response.usage
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens > 0
    assert response.model_extra["guardrail"] == {"rollbacks": 0, "lists": {}, "filtered_by": None}


def test_a_streamed_response_sends_the_events_in_order_and_the_same_text(openai_client):
    whole = openai_client.responses.create(**ASK).output_text
    events = list(openai_client.responses.create(**ASK, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) > 1 and "".join(deltas) == whole == events[-1].response.output_text


def test_the_guard_applies_to_responses(openai_client):
    raw = openai_client.responses.with_raw_response.create(**ASK, extra_body={"banned_terms": ["Paris"]})
    response = raw.parse()
    assert "paris" not in response.output_text.lower()
    rollbacks = response.model_extra["guardrail"]["lists"]["request"]
    assert rollbacks >= 1 and raw.headers["Guardrail-Rollbacks"] == f"request={rollbacks}"


def test_a_streamed_response_is_guarded_and_its_last_event_says_why(openai_client):
    guarded = {**ASK, "extra_body": {"banned_terms": ["Paris"]}}
    whole = openai_client.responses.create(**guarded)
    events = list(openai_client.responses.create(**guarded, stream=True))
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert deltas and not any("paris" in d.lower() for d in deltas)
    last = events[-1]
    assert last.type == f"response.{whole.status}" and "".join(deltas) == last.response.output_text
    assert last.response.output_text == whole.output_text
    # The rollbacks' record (list names and counts) reaches the stream's last event as it does the body.
    assert last.response.model_extra["guardrail"] == whole.model_extra["guardrail"]
    assert last.response.model_extra["guardrail"]["lists"]["request"] >= 1


def test_a_response_cut_by_max_output_tokens_is_incomplete(openai_client):
    response = openai_client.responses.create(**{**ASK, "max_output_tokens": 2})
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    assert response.usage.output_tokens == 2


@pytest.mark.parametrize(("field", "value"), [("previous_response_id", "resp_1"),
                                              ("text", {"format": {"type": "xml"}})])
def test_fields_this_endpoint_cannot_honour_are_a_400_naming_them(openai_client, field, value):
    with pytest.raises(openai.BadRequestError) as failure:
        openai_client.responses.create(**ASK, extra_body={field: value})
    assert error_of(failure.value)["param"] in (field, f"{field}.format")


# -- tools: the flat function tool shape, function_call items out and in ----------------------------------

WEATHER = {"type": "function", "name": "get_weather", "description": "Get the current weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city name"}},
                          "required": ["city"]}}
# One worked example first (as tests/test_service_tools.py does for chat): SmolLM2-135M writes a well-formed call
# after it. Here the example travels as a function_call item and its function_call_output.
ASK_WEATHER = [
    {"role": "user", "content": "What is the weather like in London?"},
    {"type": "function_call", "call_id": "call_0", "name": "get_weather", "arguments": '{"city": "London"}'},
    {"type": "function_call_output", "call_id": "call_0", "output": "Rainy, 12 degrees Celsius."},
    {"role": "assistant", "content": "It is rainy in London, 12 degrees Celsius."},
    {"role": "user", "content": "What is the weather like in Paris?"},
]
TOOL_ASK = {"model": MODEL, "input": ASK_WEATHER, "tools": [WEATHER], "temperature": 0, "max_output_tokens": 48,
            "tool_choice": {"type": "function", "name": "get_weather"}}


def test_a_named_tool_choice_answers_with_a_function_call_item(openai_client):
    response = openai_client.responses.create(**TOOL_ASK)
    assert response.status == "completed"
    [call] = response.output
    assert call.type == "function_call" and call.name == "get_weather" and call.call_id.startswith("call_")
    assert json.loads(call.arguments) == {"city": "Paris"}
    assert response.tools[0].name == "get_weather" and response.tool_choice.name == "get_weather"
    events = list(openai_client.responses.create(**TOOL_ASK, stream=True))
    kinds = [e.type for e in events]
    deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert kinds[2] == "response.output_item.added" and len(deltas) > 1 and "".join(deltas) == call.arguments
    assert kinds[-3:] == ["response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    [streamed] = events[-1].response.output
    assert (streamed.type, streamed.name, streamed.arguments) == ("function_call", call.name, call.arguments)


def test_tools_without_a_call_answer_with_text_and_bad_tools_are_a_400(openai_client):
    response = openai_client.responses.create(**ASK, tools=[WEATHER], tool_choice="none")
    assert "Paris" in response.output_text and [item.type for item in response.output] == ["message"]
    with pytest.raises(openai.BadRequestError) as built_in:
        openai_client.responses.create(**ASK, tools=[{"type": "web_search"}])
    assert error_of(built_in.value)["param"].startswith("tools.0")
    with pytest.raises(openai.BadRequestError) as unknown:
        openai_client.responses.create(**ASK, tools=[WEATHER], tool_choice={"type": "function", "name": "other"})
    assert error_of(unknown.value)["param"] == "tool_choice.name"
