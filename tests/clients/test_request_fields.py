"""Every field of the ``openai`` and ``anthropic`` client libraries' request types is taken, refused with a 400
naming it, or ignored with a reason, on each route (service/schemas/fields.py), and docs/service.md says which.

The fields are read from the libraries' own request ``TypedDict``s, so a field a new client version adds fails
:func:`test_every_client_field_is_classified` until it is put in the table (and the docs)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers.service import CLIENT_KEY, MODEL

from service.schemas.fields import CHAT, COMPLETIONS, MESSAGES, RESPONSES, FieldRule

ROOT = Path(__file__).resolve().parents[2]
USER = [{"role": "user", "content": "Hi"}]
#: Route -> (the table, a minimal request that generates one token, the client's request type's module and name).
ROUTES = {
    "/v1/chat/completions": (CHAT, {"model": MODEL, "messages": USER, "max_tokens": 1},
                             ("openai.types.chat.completion_create_params", "CompletionCreateParamsBase")),
    "/v1/completions": (COMPLETIONS, {"model": MODEL, "prompt": "Hi", "max_tokens": 1},
                        ("openai.types.completion_create_params", "CompletionCreateParamsBase")),
    "/v1/responses": (RESPONSES, {"model": MODEL, "input": "Hi", "max_output_tokens": 1},
                      ("openai.types.responses.response_create_params", "ResponseCreateParamsBase")),
    "/v1/messages": (MESSAGES, {"model": MODEL, "messages": USER, "max_tokens": 1},
                     ("anthropic.types.message_create_params", "MessageCreateParamsBase")),
}
#: A value that sets the field (anything truthy unless the field's type needs more).
SAMPLES = {
    "echo": True, "best_of": 2, "thinking": {"type": "enabled", "budget_tokens": 1024},
    "metadata": {"user_id": "u"}, "stream_options": {"include_usage": False}, "modalities": ["text"],
    "include": ["message.output_text.logprobs"], "reasoning": {"effort": "low"}, "max_tool_calls": 1,
    "context_management": [{"type": "compaction"}], "cache_control": {"type": "ephemeral"}, "diagnostics": {},
    "truncation": "auto", "top_logprobs": 2, "moderation": {"mode": "off"},
}


def client_fields(route: str) -> set[str]:
    import importlib

    module, name = ROUTES[route][2]
    params = getattr(importlib.import_module(module), name)
    return set(params.__required_keys__ | params.__optional_keys__) | {"stream"}  # stream: the subclasses'


def _post(service, route: str, body: dict):
    headers = {"Authorization": f"Bearer {CLIENT_KEY}", "x-api-key": CLIENT_KEY}
    return service.post(route, json=body, headers=headers)


@pytest.mark.parametrize("route", ROUTES)
def test_every_client_field_is_classified(route):
    table: dict[str, FieldRule] = ROUTES[route][0]
    assert not client_fields(route) - set(table), f"{route}: fields of the client library not in the table"


@pytest.mark.parametrize(("route", "field"), [(route, field) for route, (table, _, _) in ROUTES.items()
                                              for field, rule in table.items() if rule.verdict == "refused"])
def test_a_refused_field_is_a_400_naming_it(service, route, field):
    response = _post(service, route, {**ROUTES[route][1], field: SAMPLES.get(field, "x")})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == field, response.text


@pytest.mark.parametrize("route", ROUTES)
def test_ignored_fields_are_accepted_together(service, route):
    table, body, _ = ROUTES[route]
    ignored = {field: SAMPLES.get(field, "x") for field, rule in table.items() if rule.verdict == "ignored"}
    response = _post(service, route, {**body, **ignored})
    assert response.status_code == 200, response.text


def test_the_docs_table_says_what_each_route_does_with_every_field():
    text = (ROOT / "docs" / "service.md").read_text(encoding="utf-8")
    for route, (table, _, _) in ROUTES.items():
        section = text.split(f"#### `POST {route}`", 1)[1].split("####", 1)[0]
        rows = dict(re.findall(r"^\| `([\w.]+)` \| (taken|refused|ignored) \|", section, flags=re.MULTILINE))
        assert rows == {field: rule.verdict for field, rule in table.items()}, route
