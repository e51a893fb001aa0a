"""The end of the decode loop every engine shares (guardrail/guard/driver.py), driven by hand as an engine would:
no model, SmolLM2's tokenizer for the vocab. Each finish reason, cancel, the deadline and the room."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import pytest

from guardrail.guard.driver import DecodeDriver
from guardrail.guard.events import Finish, Rollback, TextDelta, Usage
from guardrail.guard.session import FINISH, KEEP, ROLLBACK, GuardSession
from guardrail.matching.compiler import compile_artefact
from guardrail.params import SamplingParams
from guardrail.wordlists.wordlist import wordlist_from_terms

EOS = 2  # SmolLM2's <|im_end|>, what ends a chat answer


@pytest.fixture(scope="module")
def sorry(smollm2_vocab):
    return compile_artefact(smollm2_vocab, [wordlist_from_terms(["sorry"], name="apologies")])


class Recorder:
    """A :class:`~guardrail.guard.verdict.VerdictHandler` that records what the driver asked of the engine; a
    finish goes through the driver, as every engine's does."""

    def __init__(self, driver: DecodeDriver) -> None:
        self.driver = driver
        self.events: list = []
        self.calls: list[tuple] = []

    def emit(self, events) -> None:
        self.events.extend(events)

    def on_keep(self, token_id: int, position: int) -> None:
        self.calls.append(("keep", token_id, position))

    def on_rollback(self, position: int) -> None:
        self.calls.append(("rollback", position))

    def on_finish(self, reason) -> None:
        self.calls.append(("finish", reason))
        self.events.extend(self.driver.finish(reason, forward_passes=7))


def driver_for(artefact, vocab, *, cancel=None, context_length=None, started=None, prompt_tokens=3, **params):
    request = SamplingParams(**params)
    session = GuardSession.from_params(artefact, vocab, request, eos_ids=vocab.eos_ids | {EOS},
                                       prompt_tokens=prompt_tokens)
    return DecodeDriver(session, timeout_s=request.timeout_s, max_tokens=request.max_tokens, cancel=cancel,
                        context_length=context_length, started=started)


def finish_of(events) -> Finish:
    assert isinstance(events[-1], Finish)
    return events[-1]


def test_a_kept_token_asks_for_the_next_one(sorry, smollm2_vocab, tok):
    driver = driver_for(sorry, smollm2_vocab)
    handler = Recorder(driver)
    assert driver.judge(tok(" Hello"), handler) == KEEP
    assert handler.calls == [("keep", tok(" Hello"), 1)]
    assert driver.stop_reason() is None and not driver.finished


def test_an_eos_finishes_with_stop_and_the_engines_counters(sorry, smollm2_vocab, tok):
    driver = driver_for(sorry, smollm2_vocab)
    handler = Recorder(driver)
    driver.judge(tok(" Hello"), handler)
    assert driver.judge(EOS, handler) == FINISH
    assert handler.calls[-1] == ("finish", "stop")
    finish = finish_of(handler.events)
    assert (finish.reason, finish.text, finish.token_ids) == ("stop", " Hello", (tok(" Hello"),))
    assert (finish.usage.prompt_tokens, finish.usage.completion_tokens, finish.usage.forward_passes) == (3, 1, 7)
    assert driver.finished


def test_max_tokens_finishes_with_length(sorry, smollm2_vocab, tok):
    driver = driver_for(sorry, smollm2_vocab, max_tokens=2)
    handler = Recorder(driver)
    assert driver.judge(tok(" Hello"), handler) == KEEP
    assert driver.room() == 1
    assert driver.judge(tok(" there"), handler) == FINISH
    assert handler.calls[-1] == ("finish", "length")
    assert finish_of(handler.events).text == " Hello there"


def test_a_term_rolls_back_and_a_spent_budget_finishes_with_content_filter(sorry, smollm2_vocab, tok):
    driver = driver_for(sorry, smollm2_vocab)
    handler = Recorder(driver)
    driver.judge(tok(" I"), handler)
    assert driver.judge(tok(" sorry"), handler) == KEEP  # a word that may go on ("sorryish"): held back
    assert driver.judge(tok(" about"), handler) == ROLLBACK  # the boundary completes the term
    assert handler.calls[-1] == ("rollback", 1)
    assert [type(e) for e in handler.events] == [TextDelta, Rollback]  # " I" released, then the rollback
    driver = driver_for(sorry, smollm2_vocab, max_rollbacks=0)
    handler = Recorder(driver)
    for word in (" I", " sorry"):
        driver.judge(tok(word), handler)
    assert driver.judge(tok(" about"), handler) == FINISH
    assert handler.calls[-1] == ("finish", "content_filter")
    finish = finish_of(handler.events)
    assert (finish.reason, finish.filtered_by, finish.text) == ("content_filter", "apologies", " I")


def test_the_engines_own_end_of_text_goes_through_the_end_rule(sorry, smollm2_vocab, tok):
    driver = driver_for(sorry, smollm2_vocab)
    handler = Recorder(driver)
    driver.judge(tok(" Hello"), handler)
    assert driver.judge_end(handler, "stop") == FINISH
    assert handler.calls[-1] == ("finish", "stop")
    driver = driver_for(sorry, smollm2_vocab)
    handler = Recorder(driver)
    driver.judge(tok(" I"), handler)
    driver.judge(tok(" sorry"), handler)  # a word term standing at the very end of the text
    assert driver.judge_end(handler, "length") == ROLLBACK
    assert handler.calls[-1] == ("rollback", 1)


def test_cancel_ends_with_cancelled_before_the_deadline_is_looked_at(sorry, smollm2_vocab):
    cancel = threading.Event()
    driver = driver_for(sorry, smollm2_vocab, cancel=cancel, started=time.perf_counter() - 120, timeout_s=60)
    assert driver.stop_reason() == "length"
    cancel.set()
    assert driver.stop_reason() == "cancelled"
    events = driver.finish("cancelled")
    assert finish_of(events).reason == "cancelled"
    assert events == (events[-1],)  # nothing kept: no text delta


def test_the_deadline_counts_from_started(sorry, smollm2_vocab):
    # The clock is the driver's `started` (the engine's own start: admission, stream(), the first request):
    # a driver started two minutes ago with a 60 s limit is past it, one started now is not. No sleep.
    assert driver_for(sorry, smollm2_vocab, timeout_s=60).stop_reason() is None
    late = driver_for(sorry, smollm2_vocab, timeout_s=60, started=time.perf_counter() - 120)
    assert late.stop_reason() == "length"
    assert finish_of(late.finish("length")).usage.seconds >= 120


def test_room_is_bounded_by_max_tokens_and_by_the_context(sorry, smollm2_vocab, tok):
    driver = driver_for(sorry, smollm2_vocab, max_tokens=10, context_length=8, prompt_tokens=5)
    assert driver.room() == 3  # 8 - 5 prompt tokens, below max_tokens
    handler = Recorder(driver)
    for word in (" a", " b", " c"):
        driver.judge(tok(word), handler)
    assert driver.room() == 0
    assert driver.stop_reason() is None  # a loop that does not ask for room is not ended by it
    assert driver.stop_reason(room=True) == "length"
    assert driver_for(sorry, smollm2_vocab, max_tokens=10, prompt_tokens=5).room() == 10  # no context bound


@dataclass(frozen=True)
class EngineUsage(Usage):
    requests: int = 0


def test_finish_builds_the_engines_usage_class_and_runs_once(sorry, smollm2_vocab, tok):
    driver = driver_for(sorry, smollm2_vocab)
    driver.judge(tok(" Hello"), Recorder(driver))
    finish = finish_of(driver.finish("length", reprefills=2, cached_tokens=1, usage=EngineUsage, requests=4))
    assert isinstance(finish.usage, EngineUsage)
    assert (finish.usage.requests, finish.usage.reprefills, finish.usage.cached_tokens) == (4, 2, 1)
    assert finish.usage.completion_tokens == 1
    with pytest.raises(RuntimeError):
        driver.finish("length")


def test_a_text_delta_released_at_finish_comes_before_the_finish(sorry, smollm2_vocab, tok):
    driver = driver_for(sorry, smollm2_vocab)
    handler = Recorder(driver)
    driver.judge(tok(" I"), handler)
    driver.judge(tok(" so"), handler)  # " so" may begin "sorry": held back
    events = driver.finish("length")
    assert [type(e) for e in events] == [TextDelta, Finish]
    assert "".join(e.text for e in (*handler.events, *events) if isinstance(e, TextDelta)) == " I so"
