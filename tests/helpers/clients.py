"""What the client conformance suite (tests/clients/) shares: the request it makes, the term it bans and the
check of a call's arguments."""

from __future__ import annotations

import json

import jsonschema

#: The term the requests ban: the model's usual answer to :data:`ASK` (a city name inside tool arguments).
BANNED = ["Paris"]
ASK = "What is the weather like in Paris?"
#: The arguments of ``get_weather`` (the same in every library's shape).
WEATHER_PARAMETERS = {"type": "object", "properties": {"city": {"type": "string", "description": "The city name"}},
                      "required": ["city"], "additionalProperties": False}
#: A cap per answer: a call is about 30 tokens of markup and arguments with SmolLM2; room for two, or a long string.
MAX_TOKENS = 128


def assert_valid_arguments(arguments: str | dict, schema: dict = WEATHER_PARAMETERS) -> dict:
    """The call's arguments (a JSON string or object) parse, follow ``schema`` and hold no banned term."""
    value = json.loads(arguments) if isinstance(arguments, str) else arguments
    jsonschema.validate(value, schema)
    text = json.dumps(value, ensure_ascii=False).lower()
    assert not any(term.lower() in text for term in BANNED), value
    return value
