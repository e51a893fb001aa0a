"""Requests and answers as the service tests make and read them (shared by tests/service/)."""

from __future__ import annotations

import uuid

import openai

from helpers.service import ADMIN_TOKEN, MODEL, PROMPT

GREEDY = {"model": MODEL, "messages": PROMPT, "temperature": 0, "max_tokens": 24}


def unique_name() -> str:
    return f"test-{uuid.uuid4().hex[:8]}"


def check(server, text: str, token: str = ADMIN_TOKEN, **body) -> dict:
    """``/v1/check`` of ``text`` as the admin (who may read every list's terms: a client key sees the terms of
    the bundled lists and its own only, docs/service.md "Lists a tenant owns")."""
    response = server.post("/v1/check", json={"text": text, **body}, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.text
    return response.json()


def collect_stream(stream) -> tuple[list[str], list, object]:
    """(content pieces, finish reasons, usage) of a streamed chat completion."""
    pieces, reasons, usage = [], [], None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.content:
                pieces.append(choice.delta.content)
            if choice.finish_reason is not None:
                reasons.append(choice.finish_reason)
    return pieces, reasons, usage


def error_of(exc: openai.APIStatusError) -> dict:
    body = exc.response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    return body["error"]
