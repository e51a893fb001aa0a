"""Request compiles and schema limits through the real service (SmolLM2, Redis store): a chat whose 40 regex
terms are over the compile budget is a 400 naming the field and the limit while ``/healthz`` keeps answering; the
same request again is answered without a compile; a schema padded to megabytes is a 400 naming its field; the
cache bounds are on ``/metrics``."""

from __future__ import annotations

import threading
import uuid

import httpx
import pytest
from helpers.service import CLIENT_KEY, MODEL, PROMPT, metric
from helpers.wait import wait_until

pytestmark = pytest.mark.slow

AUTH = {"Authorization": f"Bearer {CLIENT_KEY}"}
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def overlapping(salt: str) -> list[str]:
    """40 distinct terms like ``re:bcd.{0,15}e`` (the review's request): together over the state limit."""
    return [f"re:{salt}{LETTERS[i % 26]}{LETTERS[(i + 1) % 26]}{LETTERS[(i + 2) % 26]}.{{0,{15 - i // 26}}}"
            f"{LETTERS[(i + 3) % 26]}" for i in range(40)]


def chat(service, **extra) -> httpx.Response:
    return service.post("/v1/chat/completions", json={"model": MODEL, "messages": PROMPT, "max_tokens": 4, **extra},
                        headers=AUTH)


def compiled(service) -> float:
    text = service.metrics()
    return sum(metric(text, "guardrail_request_compiles_total", outcome=o) for o in ("ok", "refused", "over_time"))


def refuse_while_probing(service, salt: str) -> tuple[httpx.Response, httpx.Response, bool]:
    """Send the 40-term chat from a thread; once its compile runs, GET /healthz. Returns the chat's answer, the
    probe's, and whether the compile was still running when the probe was answered."""
    compiler = service.runtime.compiler
    answers: list[httpx.Response] = []
    attack = threading.Thread(target=lambda: answers.append(chat(service, banned_terms=overlapping(salt))))
    attack.start()
    wait_until(lambda: compiler._admitted > 0 or not attack.is_alive(), 60, "the compile to start")
    health = service.get("/healthz")
    overlapped = compiler._admitted > 0
    attack.join(timeout=120)
    return answers[0], health, overlapped


def test_forty_regex_terms_are_refused_naming_the_field_while_healthz_answers(service):
    for attempt in range(5):  # until a /healthz answer is seen while the compile is in flight
        refused, health, overlapped = refuse_while_probing(service, f"{attempt}")
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert error["param"] == "banned_terms"
        assert ("GUARDRAIL_REQUEST_COMPILE_TIME_S" in error["message"]
                or "GUARDRAIL_REQUEST_COMPILE_MAX_STATES" in error["message"]), error["message"]
        assert health.status_code == 200
        if overlapped:
            return
    pytest.fail("no /healthz answer was seen while a compile ran")


def test_a_refused_set_is_answered_again_without_a_compile(service):
    terms = overlapping(f"r{uuid.uuid4().hex[:4]}")
    first = chat(service, banned_terms=terms)
    assert first.status_code == 400, first.text
    before, cached = compiled(service), metric(service.metrics(), "guardrail_request_compiles_total",
                                                outcome="refused_cached")
    again = chat(service, banned_terms=terms)
    assert (again.status_code, again.json()["error"]) == (400, first.json()["error"])
    assert compiled(service) == before
    assert metric(service.metrics(), "guardrail_request_compiles_total", outcome="refused_cached") == cached + 1


def test_a_schema_padded_to_megabytes_is_a_400_naming_its_field(service):
    # 1 MiB: over the schema limit (256 KiB), under the body limit (4 MiB, a 413 beyond).
    padded = {"type": "object", "description": "x" * (1024 * 1024), "properties": {"a": {"type": "string"}}}
    response_format = {"type": "json_schema", "json_schema": {"name": "padded", "schema": padded}}
    refused = chat(service, response_format=response_format)
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert (error["param"], error["code"]) == ("response_format", "schema_too_large")
    assert "GUARDRAIL_MAX_SCHEMA_BYTES" in error["message"]
    tools = [{"type": "function", "function": {"name": "ok", "parameters": {"type": "object"}}},
             {"type": "function", "function": {"name": "big", "parameters": padded}}]
    refused = chat(service, tools=tools, tool_choice="auto")
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["param"] == "tools.1.function.parameters"


def test_the_cache_bounds_are_on_metrics(service):
    text = service.metrics()
    settings = service.runtime.settings
    for cache, bound in (("grammars", settings.grammar_cache_bytes), ("artefacts", settings.artefact_cache_bytes),
                         ("text_matchers", settings.text_matcher_cache_bytes),
                         ("escalation", settings.escalation_cache_bytes),
                         ("compile_refusals", settings.compile_refusal_cache_bytes)):
        assert metric(text, "guardrail_cache_limit_bytes", cache=cache) == bound
    assert metric(text, "guardrail_cache_bytes", cache="artefacts") > 0  # the default set's artefact
