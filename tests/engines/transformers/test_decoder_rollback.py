"""StreamingDecoder on SmolLM2: rollback by cache crop, position-keyed bans, budgets, stop conditions, streaming.

Several scenarios pin the model down with ``logit_bias`` (+100 / +70 / +40 on " cat" / " dog" / " fish") and
``suppress_tokens`` (everything else), so that greedy decoding follows a script whatever the weights say:
it picks " cat" unless banned, then " dog", then " fish".
"""

import threading

import pytest
import torch

from guardrail.engines.transformers.decoder import StreamingDecoder, generation_eos_ids
from guardrail.guard.events import Finish, Rollback, TextDelta
from guardrail.matching.compiler import compile_artefact
from guardrail.matching.obfuscation import OFF  # the artefacts here compile the lists as they are
from guardrail.matching.textmatch import TextMatcher
from guardrail.matching.vocab import TokenVocab
from guardrail.params import SamplingParams
from guardrail.prompts import prompt_ids
from guardrail.wordlists.wordlist import MatchMode, Term, bundled_wordlist, wordlist_from_terms

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def vocab(smollm2_model, smollm2_tokenizer):
    return TokenVocab.from_tokenizer(smollm2_tokenizer, eos_ids=generation_eos_ids(smollm2_model))


@pytest.fixture(scope="module")
def decoder(smollm2_model, smollm2_tokenizer, vocab):
    return StreamingDecoder(smollm2_model, smollm2_tokenizer, vocab)


@pytest.fixture(scope="module")
def chat(smollm2_tokenizer):
    return lambda text: prompt_ids(smollm2_tokenizer, messages=[{"role": "user", "content": text}])


@pytest.fixture(scope="module")
def script(smollm2_tokenizer):
    """Sampling options that make greedy decoding pick " cat" > " dog" > " fish", nothing else."""
    cat, dog, fish = (smollm2_tokenizer.encode(w, add_special_tokens=False) for w in (" cat", " dog", " fish"))
    assert len(cat) == len(dog) == len(fish) == 1
    allowed = {cat[0], dog[0], fish[0]}
    return dict(temperature=0, logit_bias={cat[0]: 100.0, dog[0]: 70.0, fish[0]: 40.0},
                suppress_tokens=tuple(i for i in range(len(smollm2_tokenizer)) if i not in allowed))


def compile_terms(vocab, *terms):
    lists = [wordlist_from_terms(terms)]
    return compile_artefact(vocab, lists), TextMatcher(lists, obfuscation=OFF)


def run(decoder, ids, artefact, **params):
    events = list(decoder.stream(ids, artefact, SamplingParams(**params)))
    return events, events[-1]


def assert_clean_stream(events, matcher):
    """One Finish, last; every released prefix free of terms; chunks concatenate to the final text."""
    assert isinstance(events[-1], Finish) and not any(isinstance(e, Finish) for e in events[:-1])
    released = ""
    for event in events:
        if isinstance(event, TextDelta):
            released += event.text
            assert matcher.scan(released) == [], released
    assert released == events[-1].text
    assert matcher.scan(events[-1].text) == []


def rollbacks(events):
    return [e for e in events if isinstance(e, Rollback)]


def assert_bounded_work(events, finish):
    """The decoder's work is bounded by what it picked (a count, not a clock): one prefill, then at most one
    forward pass per token picked, kept to the end or rolled back, plus per rollback (refused ones included) and at the end the one
    pick it did not keep (the token completing a term, a refused pick); no re-prefill."""
    usage = finish.usage
    assert usage.reprefills == 0
    picked = usage.completion_tokens + sum(r.tokens_discarded for r in rollbacks(events))
    assert usage.forward_passes <= 1 + picked + usage.rollbacks + 1, (usage, picked)


# -- identity and cost -----------------------------------------------------------------------------------

@pytest.mark.parametrize("question", ["What is the capital of France?", "Name three primary colors.",
                                      "How many legs does a spider have?"])
def test_guarded_greedy_equals_generate_when_nothing_is_hit(decoder, vocab, smollm2_model, chat, question):
    ids = chat(question)
    artefact = compile_artefact(vocab, [bundled_wordlist("en")])
    with torch.inference_mode():
        out = smollm2_model.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=20,
                                     eos_token_id=sorted(decoder.eos_ids), pad_token_id=sorted(decoder.eos_ids)[0])
    expected = [t for t in out[0, len(ids):].tolist() if t not in decoder.eos_ids]
    for guard in (artefact, None):
        events, finish = run(decoder, ids, guard, temperature=0, max_tokens=20)
        assert list(finish.token_ids) == expected
        assert rollbacks(events) == []


def test_rollback_crops_the_cache_and_costs_no_extra_forward_pass(decoder, vocab, chat):
    artefact, matcher = compile_terms(vocab, "sorry")
    events, finish = run(decoder, chat("Repeat after me: I am sorry."), artefact, temperature=0, max_tokens=40,
                         speculative=False)  # one pass per kept token (drafts would save passes)
    assert_clean_stream(events, matcher)
    discarded = sum(r.tokens_discarded for r in rollbacks(events))
    assert discarded >= 1 and finish.reason == "stop"
    usage = finish.usage
    assert usage.reprefills == 0
    # One prefill, then one pass per token that was kept at the time; a re-pick reuses kept logits.
    assert usage.forward_passes == 1 + usage.completion_tokens + discarded


# -- bans ------------------------------------------------------------------------------------------------

def test_rollback_to_an_earlier_position_lifts_later_bans(decoder, vocab, chat, script):
    # " cat cat" -> back to 0, ban " cat" | " dog cat cat" -> back to 1, ban " cat" at 1
    # " dog dog" -> back to 0, ban " dog": the ban of " cat" at 1 belonged to the prefix " dog" and is gone,
    # so " fish cat" is allowed and " fish cat cat" is caught at position 1 again. Kept forever (the
    # reference decoder's stale bans), " cat" stays banned at 1 and the next rollback is at position 2.
    # Evasion guard off: escalated, "cat cat" would also match as a substring, one token sooner (no right
    # boundary to wait for), which changes the scripted sequence (tests/guard/test_escalation.py covers that).
    artefact, matcher = compile_terms(vocab, "cat cat", "dog dog")
    events, finish = run(decoder, chat("Name some animals."), artefact, max_tokens=4, evasion_guard="off", **script)
    assert [(r.position, r.tokens_discarded) for r in rollbacks(events)][:4] == [(0, 2), (1, 2), (0, 2), (1, 2)]
    assert finish.text.startswith(" fish")
    assert_clean_stream(events, matcher)


def test_every_candidate_banned_ends_with_content_filter(decoder, vocab, chat, script):
    artefact, matcher = compile_terms(vocab, "cat", "dog", "fish")
    events, finish = run(decoder, chat("Name some animals."), artefact, max_tokens=8, **script)
    assert finish.reason == "content_filter" and finish.text == ""
    assert [r.position for r in rollbacks(events)] == [0, 0, 0]
    assert_bounded_work(events, finish)  # ended by the bans, not by running on
    assert_clean_stream(events, matcher)


@pytest.mark.parametrize("budget, text", [
    (dict(max_rollbacks=4), " fish dog"),              # the 5th rollback (to position 2) is refused
    (dict(max_rollbacks_per_position=1), ""),          # the 2nd rollback to position 0 is refused
])
def test_spent_rollback_budget_ends_with_content_filter_before_the_term(decoder, vocab, chat, script, budget, text):
    artefact, matcher = compile_terms(vocab, "cat cat", "dog dog")
    events, finish = run(decoder, chat("Name some animals."), artefact, max_tokens=6, evasion_guard="off", **script,
                         **budget)  # the scripted sequence of the test above (evasion guard off, see there)
    assert_bounded_work(events, finish)
    assert finish.reason == "content_filter"
    assert finish.text == text
    assert_clean_stream(events, matcher)


# -- ends of text ----------------------------------------------------------------------------------------

def test_word_term_as_the_very_last_text_is_rolled_back(decoder, vocab, chat):
    # max_tokens=1 ends the text right after "Hello": the word is complete only because the text ends.
    artefact, matcher = compile_terms(vocab, "hello")
    events, finish = run(decoder, chat("Say hello to my friend."), artefact, temperature=0, max_tokens=1)
    assert [(r.position, r.tokens_discarded) for r in rollbacks(events)][:1] == [(0, 1)]
    assert finish.reason == "length"
    assert_clean_stream(events, matcher)


def test_stop_string_is_held_back_and_never_emitted(decoder, vocab, chat):
    artefact, matcher = compile_terms(vocab, "sorry")
    events, finish = run(decoder, chat("What is the capital of France?"), artefact, temperature=0, max_tokens=20,
                         stop=("aris",))
    assert finish.reason == "stop"
    assert finish.text == "The capital of France is P"  # cut inside the token " Paris"
    assert_clean_stream(events, matcher)


def test_term_completed_by_cutting_at_a_stop_string_is_rolled_back(decoder, vocab, chat):
    # Cut at "aris", the text would end in "... is P": the phrase "is p" (word) matches only there.
    artefact, matcher = compile_terms(vocab, "is p")
    events, finish = run(decoder, chat("What is the capital of France?"), artefact, temperature=0, max_tokens=20,
                         stop=("aris",))
    assert rollbacks(events)
    assert not finish.text.endswith("is P")
    assert_clean_stream(events, matcher)


def test_wall_clock_limit_ends_with_length(decoder, chat):
    events, finish = run(decoder, chat("Tell me a long story about a dragon."), None, temperature=0,
                         max_tokens=500, timeout_s=0.5)
    assert finish.reason == "length"
    assert finish.usage.completion_tokens < 500  # cut by the time limit, not by max_tokens
    assert_bounded_work(events, finish)


def test_cancel_event_ends_the_stream(decoder, vocab, chat):
    artefact, matcher = compile_terms(vocab, "dragon")
    cancel = threading.Event()
    events = []
    for event in decoder.stream(chat("Tell me a long story."), artefact, SamplingParams(temperature=0, max_tokens=200),
                                cancel):
        events.append(event)
        if isinstance(event, TextDelta):
            cancel.set()
    assert events[-1].reason == "cancelled"
    assert events[-1].usage.completion_tokens < 200
    assert_clean_stream(events, matcher)


# -- adversarial splits ----------------------------------------------------------------------------------

@pytest.mark.parametrize("question, bias", [("Say the word 'listen'.", 6.0), ("Write the word listen in quotes.", 4.0)])
def test_term_pushed_into_a_non_canonical_split_is_still_caught(decoder, vocab, chat, smollm2_tokenizer, question,
                                                                bias):
    list_, en = (smollm2_tokenizer.encode(w, add_special_tokens=False)[0] for w in ("list", "en"))
    params = dict(temperature=0, max_tokens=16, logit_bias={list_: bias, en: bias})
    artefact, matcher = compile_terms(vocab, "listen")
    _, unguarded = run(decoder, chat(question), None, **params)
    pairs = list(zip(unguarded.token_ids, unguarded.token_ids[1:]))
    assert (list_, en) in pairs and matcher.scan(unguarded.text)  # the bias does make it spell "list"+"en"
    events, finish = run(decoder, chat(question), artefact, **params)
    assert rollbacks(events)
    assert_clean_stream(events, matcher)


def test_substring_term_inside_longer_words_is_caught(decoder, vocab, chat):
    terms = [wordlist_from_terms([Term("capit", MatchMode.SUBSTRING)])]
    artefact, matcher = compile_artefact(vocab, terms), TextMatcher(terms, obfuscation=OFF)
    events, finish = run(decoder, chat("What is the capital of France?"), artefact, temperature=0, max_tokens=12)
    assert_clean_stream(events, matcher)
