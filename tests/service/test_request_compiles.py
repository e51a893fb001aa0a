"""The request-term compile pool (service/request_compiles.py), on its own: the budget refusal names the field
and the limit, refused sets are answered from memory without a compile, and a full pool answers 503 at once.
(The same through the HTTP service, with /healthz answering meanwhile: test_service_request_compiles.py.)"""

from __future__ import annotations

import asyncio

import pytest
from helpers.service import metric

from guardrail.matching.regex.automaton import MAX_REQUEST_REGEX_DFA_STATES
from service.errors import ApiError
from service.metrics import ServiceMetrics
from service.request_compiles import RequestCompiler
from service.settings import Settings

LETTERS = "abcdefghijklmnopqrstuvwxyz"


def overlapping(count: int, salt: str = "") -> list[str]:
    """Distinct terms like ``re:bcd.{0,15}e``: each compiles alone, 40 together are over the state limit."""
    return [f"re:{salt}{LETTERS[i % 26]}{LETTERS[(i + 1) % 26]}{LETTERS[(i + 2) % 26]}.{{0,{15 - i // 26}}}"
            f"{LETTERS[(i + 3) % 26]}" for i in range(count)]


def compiler(**settings) -> tuple[RequestCompiler, ServiceMetrics]:
    metrics = ServiceMetrics(with_redis=False)
    return RequestCompiler(Settings(**settings), metrics), metrics


def compiles(metrics: ServiceMetrics, outcome: str) -> float:
    from prometheus_client import generate_latest

    return metric(generate_latest(metrics.registry).decode(), "guardrail_request_compiles_total", outcome=outcome)


async def refused(pool: RequestCompiler, terms: list[str]) -> ApiError:
    with pytest.raises(ApiError) as caught:
        await pool.request_list(terms, "banned_terms")
    return caught.value


def test_forty_overlapping_terms_are_a_400_naming_the_field_and_the_limit_then_answered_from_memory():
    pool, metrics = compiler()

    async def scenario():
        first = await refused(pool, overlapping(40))
        assert (first.status, first.param) == (400, "banned_terms")
        assert ("GUARDRAIL_REQUEST_COMPILE_TIME_S" in first.message
                or "GUARDRAIL_REQUEST_COMPILE_MAX_STATES" in first.message), first.message
        compiled = compiles(metrics, "refused") + compiles(metrics, "over_time")
        assert compiled == 1
        again = await refused(pool, overlapping(40))
        assert (again.status, again.param, again.message) == (400, "banned_terms", first.message)
        # The second answer came from memory: one more refused_cached, no more compiles.
        assert compiles(metrics, "refused_cached") == 1
        assert compiles(metrics, "refused") + compiles(metrics, "over_time") == compiled
        assert pool.refusals_bytes > 0

    try:
        asyncio.run(scenario())
    finally:
        pool.close()


def test_the_time_budget_stops_a_compile_with_a_400_naming_it():
    pool, metrics = compiler(request_compile_time_s=0.05)

    async def scenario():
        error = await refused(pool, overlapping(40, salt="q"))
        assert (error.status, error.param, error.code) == (400, "banned_terms", "compile_budget_exceeded")
        assert "0.05 s" in error.message and "GUARDRAIL_REQUEST_COMPILE_TIME_S" in error.message
        assert compiles(metrics, "over_time") == 1

    try:
        asyncio.run(scenario())
    finally:
        pool.close()


def test_too_many_regex_terms_are_a_413_before_any_compile():
    pool, metrics = compiler(max_request_regex_terms=3)

    async def scenario():
        error = await refused(pool, ["plain"] + overlapping(4, salt="z"))
        assert (error.status, error.param, error.code) == (413, "banned_terms", "too_many_regex_terms")
        assert "GUARDRAIL_MAX_REQUEST_REGEX_TERMS" in error.message
        assert (await pool.request_list(["plain", "re:w[o0]rd"], "banned_terms")).name == "request"
        assert compiles(metrics, "ok") == 1

    try:
        asyncio.run(scenario())
    finally:
        pool.close()


def test_a_full_pool_answers_503_at_once_instead_of_queueing():
    pool, metrics = compiler(request_compile_workers=1, request_compile_queue=0, request_compile_time_s=30,
                             request_compile_max_states=MAX_REQUEST_REGEX_DFA_STATES)

    async def scenario():
        slow = asyncio.ensure_future(pool.request_list(overlapping(40, salt="s"), "banned_terms"))
        while pool._admitted == 0:  # the slow compile holds the one thread (it ends at its state limit)
            await asyncio.sleep(0.01)
        busy = await refused(pool, ["re:w[o0]rd"])
        assert (busy.status, busy.code, busy.headers.get("Retry-After")) == (503, "compile_busy", "1")
        assert not slow.done()  # answered while the other compile still ran
        assert compiles(metrics, "busy") == 1
        with pytest.raises(ApiError):
            await slow

    try:
        asyncio.run(scenario())
    finally:
        pool.close()


def test_a_cancelled_request_holds_its_slot_until_its_compile_ends():
    pool, _ = compiler(request_compile_workers=1, request_compile_queue=0, request_compile_time_s=30)

    async def scenario():
        slow = asyncio.ensure_future(pool.request_list(overlapping(40, salt="c"), "banned_terms"))
        while pool._admitted == 0:
            await asyncio.sleep(0.01)
        slow.cancel()  # the client went away; its compile thread cannot be stopped from outside
        busy = await refused(pool, ["re:w[o0]rd"])
        assert busy.code == "compile_busy"  # the running compile still holds the one slot
        while pool._admitted:  # freed when the compile ends (at its state limit)
            await asyncio.sleep(0.01)
        assert (await pool.request_list(["re:w[o0]rd"], "banned_terms")).name == "request"

    try:
        asyncio.run(scenario())
    finally:
        pool.close()
