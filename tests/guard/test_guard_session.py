"""The guard session, driven by hand as an engine would: no model, no torch (SmolLM2's tokenizer for the vocab).

Token ids are looked up with the tokenizer so that each test reads as text: " hello" is one token, " world"
another.
"""

import subprocess
import sys

import numpy as np
import pytest

from guardrail.guard.events import Finish, Rollback, TextDelta
from guardrail.guard.session import FINISH, KEEP, ROLLBACK, GuardSession, MaskSession
from guardrail.matching.compiler import compile_artefact
from guardrail.wordlists.wordlist import MatchMode, Term, wordlist_from_terms


@pytest.fixture(scope="module")
def hello(smollm2_vocab):
    """The word term "hello" (complete only once a non-letter follows) and the phrase "good morning"."""
    return compile_artefact(smollm2_vocab, [wordlist_from_terms(["hello", "good morning"], name="greetings")])


def session(artefact, vocab, **kwargs):
    return GuardSession(artefact, vocab, eos_ids=vocab.eos_ids | {2}, **kwargs)


def mask_session(artefact, vocab):
    return MaskSession(artefact, vocab, eos_ids=vocab.eos_ids | {2})


def texts(events):
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def test_the_session_module_imports_no_torch():
    code = "import sys, guardrail.guard.session; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_a_token_completing_a_term_rolls_back_to_where_the_term_began_and_bans_its_first_token(
        hello, smollm2_vocab, tok):
    s = session(hello, smollm2_vocab)
    assert s.accept(tok(" hi")).kind == KEEP
    step = s.accept(tok(" hello"))
    assert step == (KEEP, 2, (), None)  # the word may go on ("hellos"): held back, not final yet
    step = s.accept(tok(" world"))  # the boundary after "hello" completes the term
    assert step.kind == ROLLBACK and step.position == 1
    # The event names the term, the text taken back (the boundary token that completed it included) and
    # where it stood: after the 3 characters " hi".
    assert step.events == (Rollback(position=1, list_name="greetings", tokens_discarded=1, escalated=True,
                                    term="hello", fragment=" hello world", offset=3, attempt=1),)
    assert s.position == 1 and s.token_ids == (tok(" hi"),)
    assert tok(" hello") in s.mask_ids()


def test_bans_hold_for_their_position_only(hello, smollm2_vocab, tok):
    s = session(hello, smollm2_vocab, evasion_guard="off")  # escalated, "hello" is masked at every later position
    s.accept(tok(" hello"))
    s.accept(tok("!"))  # rolled back to 0, " hello" banned there
    assert tok(" hello") in s.mask_ids()
    assert s.accept(tok(" hi")).kind == KEEP
    assert tok(" hello") not in s.mask_ids()  # position 1: a different prefix


def test_mask_ids_is_the_same_array_until_the_bans_in_force_change(hello, smollm2_vocab, tok):
    s = session(hello, smollm2_vocab)
    first = s.mask_ids()
    s.accept(tok(" hi"))
    assert s.mask_ids() is first  # no bans anywhere: always-banned ids only
    s.accept(tok(" hello"))
    s.accept(tok("."))  # back to 1, " hello" banned there
    banned = s.mask_ids()
    assert banned is not first and banned is s.mask_ids()
    assert set(first.tolist()) < set(banned.tolist())
    assert banned.dtype == np.int64


def test_text_is_released_only_once_no_term_can_claim_it(hello, smollm2_vocab, tok):
    s = session(hello, smollm2_vocab)
    out = []
    for word in (" good", " day", " good", " morning"):
        step = s.accept(tok(word))
        out.extend(step.events)
        if word == " good":
            assert not texts(step.events).endswith(" good")  # "good morning" may still complete
    assert texts(out) == " good day"
    assert [type(e) for e in out] == [TextDelta]
    assert s.held_back == 2


def test_eos_after_a_pending_word_term_rolls_back(hello, smollm2_vocab, tok):
    s = session(hello, smollm2_vocab)
    s.accept(tok(" hi"))
    s.accept(tok(" hello"))
    step = s.accept(2)  # EOS: the text would end right after "hello"
    assert step.kind == ROLLBACK and step.position == 1
    (rollback,) = step.events
    assert (rollback.term, rollback.fragment, rollback.offset) == ("hello", " hello", 3)  # no candidate token
    assert s.accept(2) == (FINISH, 1, (), "stop")


def test_each_rollback_to_the_same_position_counts_one_more_attempt(hello, smollm2_vocab, tok):
    s = session(hello, smollm2_vocab, evasion_guard="off")
    s.accept(tok(" hi"))
    attempts = []
    for first in (" good", " Good"):  # the re-pick at position 1 begins the phrase again
        s.accept(tok(first))
        s.accept(tok(" morning"))
        step = s.accept(tok("!"))  # the boundary completes the word term
        assert step.kind == ROLLBACK and step.position == 1
        attempts.append(step.events[-1])
    assert [(r.attempt, r.fragment, r.term) for r in attempts] == [
        (1, " good morning!", "good morning"), (2, " Good morning!", "good morning")]
    assert s.accept(tok(" there")).kind == KEEP


def test_max_tokens_ends_with_length_after_the_end_of_text_check(hello, smollm2_vocab, tok):
    s = session(hello, smollm2_vocab, max_tokens=2)
    events = list(s.accept(tok(" hi")).events)
    step = s.accept(tok(" hello"))  # the last token allowed, and "hello" is complete at the end of text
    assert step.kind == ROLLBACK and step.position == 1
    step = s.accept(tok(" there"))  # the re-pick
    assert step.kind == FINISH and step.finish_reason == "length"
    events += [*step.events, *s.finish("length", forward_passes=7)]
    done = events[-1]
    assert isinstance(done, Finish) and done.reason == "length" and done.filtered_by is None
    assert done.text == " hi there" == texts(events)
    assert done.usage.forward_passes == 7 and done.usage.rollbacks == 1 and done.usage.completion_tokens == 2


def test_spent_rollback_budget_finishes_before_the_term(hello, smollm2_vocab, tok):
    s = session(hello, smollm2_vocab, max_rollbacks=0)
    s.accept(tok(" hi"))
    s.accept(tok(" hello"))
    step = s.accept(tok(" world"))
    assert step.kind == FINISH and step.finish_reason == "content_filter"
    done = s.finish(step.finish_reason)[-1]
    assert done.text == " hi" and done.token_ids == (tok(" hi"),)
    assert done.filtered_by == "greetings"  # the list is named, never the term


def test_stop_string_ends_the_text_before_it_and_is_never_released(hello, smollm2_vocab, tok):
    s = session(hello, smollm2_vocab, stop=("day",))
    events = list(s.accept(tok(" good")).events)
    step = s.accept(tok(" day"))
    assert step.kind == FINISH and step.finish_reason == "stop"
    events += s.finish("stop")
    assert events[-1].text == " good " == texts(events)


def test_finishing_cuts_a_word_term_that_the_end_would_complete(hello, smollm2_vocab, tok):
    s = session(hello, smollm2_vocab)
    s.accept(tok(" hi"))
    s.accept(tok(" hello"))
    assert s.finish("cancelled")[-1].text == " hi"


def test_unguarded_session_releases_every_token_at_once(smollm2_vocab, tok):
    s = session(None, smollm2_vocab, num_logits=len(smollm2_vocab) + 3)
    assert s.accept(tok(" hello")).events == (TextDelta(" hello"),)
    assert s.mask_ids().tolist() == [len(smollm2_vocab) + i for i in range(3)]  # padded logits rows
    assert s.frontier == 1


def test_completing_ids_are_the_tokens_that_would_complete_a_term_from_here(hello, smollm2_vocab, tok):
    s = mask_session(hello, smollm2_vocab)
    s.advance(tok(" hello"))
    completing = set(s.completing_ids().tolist())
    assert {tok(" world"), tok("!"), tok(".")} <= completing  # each closes the word "hello"
    assert tok("s") not in completing  # "hellos" is another word
    mask = set(s.mask_ids().tolist())
    assert 2 in mask  # ending the text here would complete "hello" too


def test_mask_only_records_a_term_completed_after_the_fact(hello, smollm2_vocab, tok):
    s = mask_session(hello, smollm2_vocab)
    assert s.advance(tok(" hello")) is None
    hit = s.advance(2)  # the engine ended the text anyway
    assert hit is not None and hit.term == "hello" and s.missed == [hit]


def test_a_finished_session_refuses_more_tokens(hello, smollm2_vocab, tok):
    s = session(hello, smollm2_vocab)
    s.accept(tok(" hi"))
    s.finish("stop")
    assert s.finished
    with pytest.raises(RuntimeError, match="already finished"):
        s.accept(tok(" hi"))
    with pytest.raises(RuntimeError, match="already finished"):
        s.end_of_text()


def test_mask_and_rollback_sessions_share_the_matcher_state_but_not_the_verbs(hello, smollm2_vocab, tok):
    rollback, mask = session(hello, smollm2_vocab), mask_session(hello, smollm2_vocab)
    assert rollback.always_banned.tolist() == mask.always_banned.tolist()
    rollback.accept(tok(" hello"))
    mask.advance(tok(" hello"))
    assert rollback.token_ids == mask.token_ids == (tok(" hello"),)
    assert rollback.completing_ids().tolist() == mask.completing_ids().tolist()
    assert not hasattr(rollback, "advance") and not hasattr(mask, "accept")


def test_from_params_takes_the_requests_stop_strings_budget_and_end_ids(hello, smollm2_vocab, tok):
    from guardrail.params import SamplingParams

    params = SamplingParams(max_tokens=3, stop=["!"], max_rollbacks=5, stop_token_ids=[7], evasion_guard="off")
    s = GuardSession.from_params(hello, smollm2_vocab, params, eos_ids={2}, prompt_tokens=4)
    assert (s.max_tokens, s.max_rollbacks, s.evasion_guard, s.prompt_tokens) == (3, 5, "off", 4)
    assert s.eos_ids == params.end_ids({2}) and 7 in s.eos_ids
    assert s.accept(tok("!")).finish_reason == "stop"


def test_artefact_for_another_vocab_is_rejected(hello, gemma3_vocab):
    with pytest.raises(ValueError, match="another tokenizer"):
        GuardSession(hello, gemma3_vocab)


@pytest.mark.parametrize("field, value", [
    ("max_tokens", 0), ("max_rollbacks", -1), ("max_rollbacks_per_position", 1.5), ("prompt_tokens", -2),
    ("num_logits", 0),
])
def test_bad_arguments_are_rejected_by_name(smollm2_vocab, field, value):
    with pytest.raises(ValueError, match=field):
        GuardSession(None, smollm2_vocab, **{field: value})


def test_substring_terms_inside_one_token_are_always_banned(smollm2_vocab, tok):
    artefact = compile_artefact(smollm2_vocab, [wordlist_from_terms([Term("ell", MatchMode.SUBSTRING)])])
    s = GuardSession(artefact, smollm2_vocab)
    assert tok(" hello") in s.always_banned and tok(" hello") in s.mask_ids()


def test_finish_reports_the_guards_time_per_step_measured_on_one_step_in_sixteen(hello, smollm2_vocab, tok,
                                                                                  monkeypatch):
    import guardrail.guard.session as session_module

    one = session(hello, smollm2_vocab)
    one.accept(tok(" hi"))  # the first step pays one-time set-up: never timed
    assert one.finish("length")[-1].usage.guard_step_seconds is None
    calls = []

    def clock() -> int:  # every timed step (a start and an end reading) lasts 3000 ns by this clock
        calls.append(None)
        return 3000 * len(calls)

    s = session(hello, smollm2_vocab, max_tokens=100)
    monkeypatch.setattr(session_module.time, "perf_counter_ns", clock)
    for _ in range(session_module.GUARD_TIMING_EVERY + 2):  # steps 2 and 18 are timed
        assert s.accept(tok(" hi")).kind == KEEP
    monkeypatch.undo()
    assert len(calls) == 4
    assert s.finish("length")[-1].usage.guard_step_seconds == pytest.approx(3e-6)
