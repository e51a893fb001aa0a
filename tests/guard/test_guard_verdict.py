"""guardrail.guard.verdict: the one place a session's verdict becomes an engine's keep / rollback / finish.

A recording handler stands in for an engine (what it records is the contract every engine relies on: the
step's events first, then exactly one action)."""

from __future__ import annotations

import pytest

from guardrail.guard.events import Finish, Rollback, TextDelta
from guardrail.guard.session import GuardSession
from guardrail.guard.verdict import FINISH, KEEP, ROLLBACK, judge, judge_end
from guardrail.matching.compiler import compile_artefact
from guardrail.wordlists.wordlist import wordlist_from_terms

EOS = 2


class Recorder:
    """A VerdictHandler that records every call in order; on_finish ends the session as an engine does."""

    def __init__(self, session: GuardSession):
        self.session = session
        self.calls: list[tuple] = []

    def emit(self, events):
        self.calls.append(("emit", tuple(events)))

    def on_keep(self, token_id, position):
        self.calls.append(("keep", token_id, position))

    def on_rollback(self, position):
        self.calls.append(("rollback", position))

    def on_finish(self, reason):
        self.calls.append(("finish", reason))
        self.calls.append(("emit", self.session.finish(reason)))


@pytest.fixture(scope="module")
def hello(smollm2_vocab):
    return compile_artefact(smollm2_vocab, [wordlist_from_terms(["hello"], name="greetings")])


@pytest.fixture
def recorder(hello, smollm2_vocab):
    return Recorder(GuardSession(hello, smollm2_vocab, eos_ids={EOS}, evasion_guard="off"))


def test_keep_emits_the_released_text_then_asks_for_the_next_positions_logits(recorder, tok):
    assert judge(recorder.session, tok(" hi"), recorder) == KEEP
    assert recorder.calls == [("emit", (TextDelta(" hi"),)), ("keep", tok(" hi"), 1)]


def test_a_completed_term_emits_its_rollback_event_then_rolls_back_to_where_it_began(recorder, tok):
    judge(recorder.session, tok(" hi"), recorder)
    judge(recorder.session, tok(" hello"), recorder)
    recorder.calls.clear()
    assert judge(recorder.session, tok("!"), recorder) == ROLLBACK
    rollback = Rollback(position=1, list_name="greetings", tokens_discarded=1, term="hello", fragment=" hello!",
                        offset=3)
    assert recorder.calls == [("emit", (rollback,)), ("rollback", 1)]
    assert recorder.session.position == 1


def test_eos_finishes_through_the_handler_which_ends_the_session(recorder, tok):
    judge(recorder.session, tok(" hi"), recorder)
    recorder.calls.clear()
    assert judge(recorder.session, EOS, recorder) == FINISH
    assert recorder.calls[:2] == [("emit", ()), ("finish", "stop")]
    finish = recorder.calls[2][1][-1]
    assert isinstance(finish, Finish) and finish.reason == "stop" and finish.text == " hi"


def test_an_engine_ending_the_text_itself_rolls_back_a_word_term_standing_at_the_end(recorder, tok):
    judge(recorder.session, tok(" hi"), recorder)
    judge(recorder.session, tok(" hello"), recorder)
    recorder.calls.clear()
    assert judge_end(recorder.session, recorder, "length") == ROLLBACK
    assert recorder.calls[-1] == ("rollback", 1)
    assert judge_end(recorder.session, recorder, "length") == FINISH
    assert recorder.calls[-2] == ("finish", "length")
