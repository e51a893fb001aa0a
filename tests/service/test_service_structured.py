"""Structured output through the service, driven with the official ``openai`` client (SmolLM2, docs/structured-output.md).

Issue 21's done-when: on eliciting prompts with ``response_format`` ``json_schema``, every answer parses against
the schema and none contains a banned term, in its final text or any streamed prefix. The prompts ask for a
name that is a banned request term, so the term would stand inside a JSON string value: the guard rolls it back
and the grammar's matcher rolls back with it.
"""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest
from helpers.service import MODEL
from helpers.service_client import collect_stream, error_of
from pydantic import BaseModel

from guardrail.matching.textmatch import TextMatcher
from guardrail.wordlists.wordlist import wordlist_from_terms

pytestmark = pytest.mark.slow

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"],
          "additionalProperties": False}
FORMAT = {"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA, "strict": True}}
#: (prompt, the term its unguarded JSON answer holds in "name": tests/engines/transformers/test_decoder_grammar.py shows it).
ELICITING = [
    ("What is the capital of France? Answer in JSON with the key name.", "Paris"),
    ("What is the capital of the United Kingdom? Reply as JSON with the key name.", "London"),
]
TERMS = [term for _, term in ELICITING]
VERIFIER = TextMatcher([wordlist_from_terms(TERMS)])


def _request(prompt: str, **extra) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": prompt}], "temperature": 0, "max_tokens": 40,
            "extra_body": {"banned_terms": TERMS}, **extra}


def _valid(text: str) -> dict:
    assert VERIFIER.scan(text) == [], text
    answer = json.loads(text)
    jsonschema.validate(answer, SCHEMA)
    return answer


@pytest.mark.parametrize(("prompt", "term"), ELICITING)
def test_json_schema_answers_parse_and_hold_no_banned_term(openai_client, prompt, term):
    answer = openai_client.chat.completions.create(**_request(prompt, response_format=FORMAT))
    choice = answer.choices[0]
    assert choice.finish_reason == "stop"
    assert term.lower() not in _valid(choice.message.content)["name"].lower()
    assert answer.usage.model_extra["rollbacks"] >= 1  # the term was there to roll back: replaced, not refused


@pytest.mark.parametrize(("prompt", "term"), ELICITING)
def test_streamed_json_schema_answers_hold_no_banned_term_in_any_prefix(openai_client, prompt, term):
    stream = openai_client.chat.completions.create(**_request(prompt, response_format=FORMAT), stream=True,
                                                   stream_options={"include_usage": True})
    pieces, reasons, usage = collect_stream(stream)
    sent = ""
    for piece in pieces:
        sent += piece
        assert VERIFIER.scan(sent) == [], sent
    assert reasons == ["stop"]
    _valid(sent)
    assert usage.model_extra["rollbacks"] >= 1


class Answer(BaseModel):
    name: str


def test_the_clients_parse_helper_gets_a_pydantic_object(openai_client):
    completion = openai_client.chat.completions.parse(
        model=MODEL, messages=[{"role": "user", "content": ELICITING[0][0]}], temperature=0, max_tokens=40,
        response_format=Answer, extra_body={"banned_terms": TERMS})
    parsed = completion.choices[0].message.parsed
    assert isinstance(parsed, Answer)
    assert VERIFIER.scan(parsed.name) == [] and parsed.name


def test_json_object_on_text_completions_and_guided_json_on_chat(openai_client):
    text = openai_client.completions.create(
        model=MODEL, prompt='A JSON object with the capital of France under "city": ', temperature=0,
        max_tokens=40, extra_body={"response_format": {"type": "json_object"}, "banned_terms": TERMS})
    choice = text.choices[0]
    assert choice.finish_reason == "stop"
    assert isinstance(json.loads(choice.text), dict) and VERIFIER.scan(choice.text) == []
    guided = openai_client.chat.completions.create(**{**_request(ELICITING[0][0]), "extra_body": {
        "banned_terms": TERMS, "guided_json": SCHEMA}})
    assert guided.choices[0].finish_reason == "stop"
    _valid(guided.choices[0].message.content)


@pytest.mark.parametrize(("extra", "param"), [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "foo"}}}},
     "response_format"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#/nowhere"}}}},
     "response_format"),
    ({"response_format": {"type": "json_schema"}}, "response_format"),
    ({"response_format": {"type": "grammar"}}, "response_format"),
    ({"guided_json": "{not json"}, "guided_json"),
    ({"guided_json": SCHEMA, "response_format": {"type": "json_object"}}, "guided_json"),
])
def test_a_bad_format_is_a_400_naming_the_field(openai_client, extra, param):
    with pytest.raises(openai.BadRequestError) as failure:
        openai_client.chat.completions.create(**{**_request(ELICITING[0][0]), "extra_body": extra})
    error = error_of(failure.value)
    assert error["param"] == param and param in error["message"]
