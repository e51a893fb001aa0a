"""The evasion guard in the guard session, driven by hand as an engine would (SmolLM2's tokenizer, no model).

"hello" is a word term: " oh" + "hello" ("ohhello"), "_" + "hello" and " Ot" + "hello" ("Othello") are not
whole-word matches. Once "hello" caused a rollback, the session escalates it: from the rollback target on it
is also matched as a substring, so those forms roll back too (guardrail/guard/escalation.py).
"""

import re

import numpy as np
import pytest

from guardrail.guard.escalation import (
    ESCALATION_ARTEFACTS,
    MIN_EDIT_CHARS,
    MIN_ESCALATION_CHARS,
    EscalationCache,
    escalation_terms,
)
from guardrail.guard.events import Finish, Rollback, TextDelta
from guardrail.guard.session import FINISH, KEEP, ROLLBACK, GuardSession
from guardrail.matching.compiler import compile_artefact, compile_request_artefact
from guardrail.matching.term_spec import flatten
from guardrail.params import check_evasion_guard
from guardrail.wordlists.wordlist import MatchMode, Term, WordList, wordlist_from_terms

EOS = 2


@pytest.fixture(scope="module")
def lists():
    return [wordlist_from_terms(["hello", "good morning"], name="greetings")]


@pytest.fixture(scope="module")
def hello(smollm2_vocab, lists):
    return compile_artefact(smollm2_vocab, lists)


def session(artefact, vocab, **kwargs):
    return GuardSession(artefact, vocab, eos_ids=vocab.eos_ids | {EOS}, **kwargs)


def drive(s, tokens):
    """Accept ``tokens`` in order; returns every step."""
    return [s.accept(t) for t in tokens]


def escalate_hello(s, tok):
    """" hi" " hello" "!": the word "hello" completes and rolls back to position 1, which escalates it."""
    steps = drive(s, [tok(" hi"), tok(" hello"), tok("!")])
    assert steps[-1].kind == ROLLBACK and steps[-1].position == 1
    return steps[-1]


def released(steps):
    return "".join(e.text for step in steps for e in step.events if isinstance(e, TextDelta))


def test_a_request_that_never_hits_builds_nothing_and_masks_the_same_array(hello, smollm2_vocab, tok):
    compiles = ESCALATION_ARTEFACTS.compiles
    s = session(hello, smollm2_vocab)
    first = s.mask_ids()
    drive(s, [tok(" hi"), tok(" oh"), tok("hello"), tok(" world")])  # "ohhello" before any hit: not a match
    assert s.escalations == ()
    assert s.mask_ids() is first is s.always_banned
    assert ESCALATION_ARTEFACTS.compiles == compiles


def test_a_hit_escalates_its_term_from_where_it_began(hello, smollm2_vocab, tok):
    s = session(hello, smollm2_vocab)
    step = escalate_hello(s, tok)
    assert step.events[-1] == Rollback(1, "greetings", 1, escalated=True, evasion=False, term="hello",
                                       fragment=" hello!", offset=3)
    (escalation,) = s.escalations
    assert escalation.start == 1 and escalation.term_id == 0
    assert s.accept(tok(" oh")).kind == KEEP
    step = s.accept(tok("hello"))  # "ohhello": glued, caught now
    assert step.kind == ROLLBACK and step.position == 2
    assert step.events[-1] == Rollback(2, "greetings", 0, escalated=False, evasion=True, term="hello",
                                       fragment="hello", offset=6)
    assert s.token_ids == (tok(" hi"), tok(" oh"))
    assert s.matcher.tokens == list(s.token_ids)  # the lists' matcher kept "hello" (no hit of its own): dropped


@pytest.mark.parametrize("glue", ["_", " Ot", " oh"])
def test_glued_and_underscore_forms_are_rolled_back_once_escalated(hello, smollm2_vocab, tok, glue):
    s = session(hello, smollm2_vocab)
    escalate_hello(s, tok)
    s.accept(tok(glue))
    step = s.accept(tok("hello"))
    assert step.kind == ROLLBACK and step.events[-1].evasion
    # Masked up front too: every token holding "hello" is in the escalation's always-banned ids.
    assert tok("hello") in s.mask_ids() and tok(" hello") in s.mask_ids()


def test_the_guard_off_keeps_the_old_behaviour(hello, smollm2_vocab, tok):
    s = session(hello, smollm2_vocab, evasion_guard="off")
    step = escalate_hello(s, tok)
    assert not step.events[-1].escalated and s.escalations == ()
    steps = drive(s, [tok(" oh"), tok("hello"), tok(".")])
    assert [st.kind for st in steps] == [KEEP, KEEP, KEEP]
    done = s.finish("stop")[-1]
    assert done.text == " hi ohhello."


def test_text_before_the_escalation_position_and_other_terms_are_unaffected(hello, smollm2_vocab, tok):
    s = session(hello, smollm2_vocab)
    steps = drive(s, [tok(" oh"), tok("hello"), tok(" hi"), tok(" hello"), tok("!")])  # escalates at 3
    assert steps[-1].kind == ROLLBACK and s.escalations[0].start == 3
    assert s.accept(tok(" good")).kind == KEEP  # "good morning" keeps its word rule: "good" alone is fine
    done = s.finish("stop")[-1]
    assert done.text == " ohhello hi good"  # the glue before the first hit stays: nothing had been refused yet


def test_the_escalation_survives_later_rollbacks_and_is_dropped_by_one_before_it(hello, smollm2_vocab, tok):
    s = session(hello, smollm2_vocab)
    steps = drive(s, [tok(" good"), tok(" hello"), tok("!")])
    assert steps[-1].kind == ROLLBACK and steps[-1].position == 1
    assert [e.start for e in s.escalations] == [1]
    assert tok("hello") in s.mask_ids()  # "hello" without a space: masked only while escalated
    # A later hit of the escalated term (" hello" again, caught as a substring at once) keeps the escalation.
    steps = drive(s, [tok(" oh"), tok(" hello")])
    assert steps[-1].kind == ROLLBACK and steps[-1].position == 2 and steps[-1].events[-1].evasion
    assert [e.start for e in s.escalations] == [1]
    # "good morning" began at 0, before the escalation position: rolling back there drops the escalation.
    s = session(hello, smollm2_vocab)
    steps = drive(s, [tok(" good"), tok(" hello"), tok("!"), tok(" morning"), tok(".")])
    assert steps[2].kind == ROLLBACK and steps[2].position == 1
    assert steps[-1].kind == ROLLBACK and steps[-1].position == 0
    # "hello" (escalated at 1) is dropped; "good morning" is escalated at 0 by its own hit.
    assert [(e.term_id, e.start) for e in s.escalations] == [(1, 0)]
    assert tok("hello") not in s.mask_ids()
    assert [s.accept(t).kind for t in (tok(" oh"), tok("hello"), tok("."))] == [KEEP, KEEP, KEEP]
    # ...and a new hit of "hello" escalates it again, from its new position.
    steps = drive(s, [tok(" hello"), tok("!")])
    assert steps[-1].kind == ROLLBACK and [(e.term_id, e.start) for e in s.escalations] == [(1, 0), (0, 3)]


def test_a_partial_escalated_match_holds_back_release(hello, smollm2_vocab, tok):
    """" oh" + "hel": the word rule alone releases it ("ohhel" cannot begin the word "hello"); escalated,
    "hel" may still become a glued "hello", so it is held back, and the rollback that comes takes back
    nothing released (TextBuffer raises rather than retract released text)."""
    unescalated = session(hello, smollm2_vocab, evasion_guard="off")
    escalate_hello(unescalated, tok)
    assert released(drive(unescalated, [tok(" oh"), tok("hel")])).endswith(" ohhel")
    s = session(hello, smollm2_vocab)
    escalate_hello(s, tok)
    out = released(drive(s, [tok(" oh"), tok("hel")]))
    assert "hel" not in out
    step = s.accept(tok("lo"))  # "ohhello"
    assert step.kind == ROLLBACK and step.position == 2 and step.events[-1].evasion
    assert s.text.text == " hi"  # all that was ever released


def test_a_second_request_on_the_same_artefact_has_no_escalation(hello, smollm2_vocab, tok):
    first = session(hello, smollm2_vocab)
    escalate_hello(first, tok)
    second = session(hello, smollm2_vocab)
    assert second.escalations == ()
    assert tok("hello") not in second.mask_ids()
    assert [second.accept(t).kind for t in (tok(" oh"), tok("hello"), tok("."))] == [KEEP, KEEP, KEEP]
    # A third request escalating the same term reuses the compiled escalation artefact, not the matcher.
    third = session(hello, smollm2_vocab)
    compiles = ESCALATION_ARTEFACTS.compiles
    escalate_hello(third, tok)
    assert ESCALATION_ARTEFACTS.compiles == compiles
    assert third.escalations[0].matcher.artefact is first.escalations[0].matcher.artefact
    assert third.escalations[0].matcher is not first.escalations[0].matcher


def test_mask_ids_is_the_same_array_until_an_escalation_starts_or_ends(hello, smollm2_vocab, tok):
    s = session(hello, smollm2_vocab)
    before = s.mask_ids()
    escalate_hello(s, tok)
    s.accept(tok(" oh"))  # position 2: no position bans, the always-banned ids only
    standing = s.mask_ids()
    assert standing is not before and standing is s.mask_ids() is s.always_banned
    assert set(before.tolist()) < set(standing.tolist()) and standing.dtype == np.int64
    assert np.all(standing[1:] > standing[:-1])


def test_end_of_text_checks_the_escalations(smollm2_vocab, tok):
    """With the allow-term "hellos", an escalated "hello" glued at the very end is pending until the text
    ends: EOS then completes it."""
    lists = [WordList("greetings", (Term("hello", MatchMode.WORD),), allow=("hellos",))]
    artefact = compile_artefact(smollm2_vocab, lists)
    s = session(artefact, smollm2_vocab)
    escalate_hello(s, tok)
    assert [s.accept(t).kind for t in (tok(" oh"), tok("hello"))] == [KEEP, KEEP]  # "ohhellos" would be allowed
    step = s.accept(EOS)
    assert step.kind == ROLLBACK and step.position == 2 and step.events[-1].evasion
    s.accept(tok(" oh"))
    done = s.finish("cancelled")[-1]  # finish() cuts at the end the same way
    assert isinstance(done, Finish) and "hello" not in done.text


def test_a_stop_string_cut_is_checked_against_the_escalations(smollm2_vocab, tok):
    """"ohhello" + "s": the allow-term "hellos" covers it — but the stop string "s" cuts the text before the
    "s", and "ohhello" at the end of the answer is an escalated match."""
    lists = [WordList("greetings", (Term("hello", MatchMode.WORD),), allow=("hellos",))]
    artefact = compile_artefact(smollm2_vocab, lists)
    s = session(artefact, smollm2_vocab, stop=("s",))
    escalate_hello(s, tok)
    drive(s, [tok(" oh"), tok("hello")])
    step = s.accept(tok("s"))
    assert step.kind == ROLLBACK and step.position == 2 and step.events[-1].evasion


def test_request_terms_escalate_through_the_combined_artefact(smollm2_vocab, tok, lists):
    stored = compile_artefact(smollm2_vocab, [wordlist_from_terms(["cat"], name="animals")])
    from guardrail.matching.combined import CombinedArtefact

    combined = CombinedArtefact(stored, compile_request_artefact(smollm2_vocab, lists))
    s = session(combined, smollm2_vocab)
    step = escalate_hello(s, tok)
    assert step.events[-1].escalated and step.events[-1].list_name == "greetings"
    s.accept(tok(" oh"))
    assert s.accept(tok("hello")).events[-1].evasion


def test_short_terms_and_one_word_substring_terms_are_not_escalated(lists):
    terms, _ = flatten([wordlist_from_terms(["cold", "no", Term("dog", MatchMode.SUBSTRING),
                                             Term("kitten", MatchMode.SUBSTRING), "thank you"])])
    cold, no, dog, kitten, thanks = terms
    assert [t.normalized for t in escalation_terms(cold, "substring")] == ["cold"]
    assert escalation_terms(no, "substring") == ()  # fewer than MIN_ESCALATION_CHARS letters
    assert MIN_ESCALATION_CHARS == 4
    assert escalation_terms(dog, "substring") == () == escalation_terms(kitten, "substring")
    assert [t.normalized for t in escalation_terms(thanks, "substring")] == ["thank you", "thankyou", "thank_you"]
    assert all(t.match is MatchMode.SUBSTRING and t.text == "thank you" for t in escalation_terms(thanks, "substring"))
    assert escalation_terms(cold, "off") == ()


def test_edit_mode_adds_the_one_edit_variants_of_terms_of_five_letters_or_more():
    terms, _ = flatten([wordlist_from_terms(["sorry", "talk", "thank you", Term("p[a4]ris", MatchMode.WORD, regex=True)])])
    sorry, talk, thanks, paris = terms
    specs = escalation_terms(sorry, "edit")
    assert [s.normalized for s in specs if not s.regex] == ["sorry"]
    assert all(s.match is MatchMode.SUBSTRING and s.text == "sorry" for s in specs)
    assert [s.term_id for s in specs] == list(range(len(specs)))
    variants = [re.compile(s.normalized) for s in specs if s.regex]

    def caught(text):
        return any(p.search(text) for p in variants)

    for one_edit in ("soory", "sorrry", "sory", "srory", "worry", "sorr-", "orry", "sorr"):
        assert caught(one_edit), one_edit  # substituted, inserted, deleted (inside or at an end), swapped
    for not_one_edit in ("suerry", "s rry", "so rry", "sry", "ory"):  # two edits, a space
        assert not caught(not_one_edit), not_one_edit
    assert escalation_terms(talk, "edit") == escalation_terms(talk, "substring")  # under MIN_EDIT_CHARS letters
    assert MIN_EDIT_CHARS == 5
    assert {s.normalized for s in escalation_terms(thanks, "edit") if not s.regex} == {"thank you", "thankyou",
                                                                                       "thank_you"}
    assert sum(s.regex for s in escalation_terms(thanks, "edit")) == 3 * 4  # each form's four kinds of edit
    # A regex term is escalated as its own pattern in substring mode, with no edit variants.
    assert [(s.normalized, s.regex, s.match) for s in escalation_terms(paris, "edit")] == [
        (paris.normalized, True, MatchMode.SUBSTRING)]


def test_the_edit_variants_compile_into_an_escalation_that_rolls_back_a_misspelling(smollm2_tokenizer,
                                                                                    smollm2_vocab, tok):
    lists = [wordlist_from_terms(["sorry"], name="apologies")]
    s = session(compile_artefact(smollm2_vocab, lists), smollm2_vocab, evasion_guard="edit")
    steps = drive(s, [tok(" I"), tok(" am"), tok(" sorry"), tok(".")])
    assert steps[-1].kind == ROLLBACK and steps[-1].events[-1].escalated and steps[-1].position == 2
    for token in smollm2_tokenizer.encode(" SOORY", add_special_tokens=False)[:-1]:
        assert s.accept(token).kind == KEEP
    last = s.accept(smollm2_tokenizer.encode(" SOORY", add_special_tokens=False)[-1])
    assert last.kind == ROLLBACK and last.position == 2 and last.events[-1].evasion


def test_unknown_mode_is_rejected_by_name(hello, smollm2_vocab):
    assert [check_evasion_guard(mode) for mode in ("off", "substring", "edit")] == ["off", "substring", "edit"]
    with pytest.raises(ValueError, match="evasion_guard"):
        check_evasion_guard("one-edit")
    with pytest.raises(ValueError, match="evasion_guard"):
        GuardSession(hello, smollm2_vocab, evasion_guard="on")


def test_the_cache_keeps_the_most_recently_used(smollm2_vocab, lists):
    cache = EscalationCache(max_bytes=2, sizeof=lambda artefact: 1)  # two artefacts of weight 1
    terms, allows = flatten([wordlist_from_terms(["hello", "world", "there"])])
    first = cache.get(smollm2_vocab, escalation_terms(terms[0], "substring"), allows)
    cache.get(smollm2_vocab, escalation_terms(terms[1], "substring"), allows)
    assert cache.get(smollm2_vocab, escalation_terms(terms[0], "substring"), allows) is first
    cache.get(smollm2_vocab, escalation_terms(terms[2], "substring"), allows)  # drops "world"
    assert len(cache) == 2 and cache.compiles == 3
    assert cache.get(smollm2_vocab, escalation_terms(terms[0], "substring"), allows) is first
    cache.get(smollm2_vocab, escalation_terms(terms[1], "substring"), allows)
    assert cache.compiles == 4


def test_finish_reports_rollbacks_and_the_budget_still_holds(hello, smollm2_vocab, tok):
    s = session(hello, smollm2_vocab, max_rollbacks_per_position=1)
    escalate_hello(s, tok)
    s.accept(tok(" oh"))
    assert s.accept(tok("hello")).kind == ROLLBACK  # the first rollback to 2
    step = s.accept(tok("hello"))  # the second one there: budget spent, the answer ends before the glue
    assert step.kind == FINISH and step.finish_reason == "content_filter"
    done = s.finish("content_filter")[-1]
    assert done.text == " hi oh" and done.usage.rollbacks == 3
