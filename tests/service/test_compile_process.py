"""The compile processes (service/compile_process.py): each outcome of a request-term compile as the parent gets
it back across the process boundary, and an accepted set's automata kept in the parent so the request's artefact
does not compile them again."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from guardrail.matching.regex.automaton import AUTOMATA, cached_automata
from guardrail.wordlists.wordlist import wordlist_from_terms
from service.compile_process import check_in_process, start_pool
from service.metrics import ServiceMetrics
from service.request_compiles import RequestCompiler
from service.settings import Settings

LETTERS = "abcdefghijklmnopqrstuvwxyz"


def overlapping(count: int, salt: str) -> list[str]:
    return [f"re:{salt}{LETTERS[i % 26]}{LETTERS[(i + 1) % 26]}{LETTERS[(i + 2) % 26]}.{{0,{15 - i // 26}}}"
            f"{LETTERS[(i + 3) % 26]}" for i in range(count)]


@pytest.fixture(scope="module")
def processes():
    pool = start_pool(1)
    yield pool
    pool.shutdown()


def test_each_outcome_comes_back_from_the_compile_process(processes):
    def run(terms, max_states=10_000, admitted=None, budget=30.0):
        return processes.submit(check_in_process, wordlist_from_terms(terms, name="request"), max_states,
                                time.monotonic() if admitted is None else admitted, budget).result()

    ok = run(["re:w[o0]rd", "plain"])
    assert ok.outcome == "ok" and len(ok.automata) == 1
    (key, automaton), = ok.automata
    assert key[1] is False and automaton.num_nodes > 0
    assert run(["re:w[o0]rd"], admitted=time.monotonic() - 60, budget=1.0).outcome == "late"
    assert run(overlapping(40, "t"), budget=0.01).outcome == "over_time"
    invalid = run(["fine", "re:a.{0,40}b"], max_states=50)
    assert invalid.outcome == "invalid" and invalid.line == 2 and "automaton" in invalid.reason


def test_the_compile_runs_in_another_process(processes):
    assert processes.submit(os.getpid).result() != os.getpid()


def test_an_accepted_set_is_kept_in_this_process_and_not_compiled_again():
    pool = RequestCompiler(Settings(), ServiceMetrics(with_redis=False))
    terms = ["re:g[a4]te.{0,2}way", "plain"]
    try:
        wordlist = asyncio.run(pool.request_list(terms, "banned_terms"))
        assert wordlist is not None and cached_automata(wordlist, Settings().request_compile_max_states)
        AUTOMATA.clear()
        assert not cached_automata(wordlist, Settings().request_compile_max_states)
    finally:
        pool.close()
