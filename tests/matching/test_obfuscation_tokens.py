"""The obfuscation streams driven token by token on the real tokenizers of both bundled models agree with the
text contract (``TextMatcher``) whatever the tokenization; a hit rolls back to the token where the obfuscated
form begins; hold-back never releases a token a later hit starts in (docs/matching.md, "Obfuscation")."""

from __future__ import annotations

import random

import pytest
from helpers.paths import load_data
from helpers.tokens import terms_by_tokens

from guardrail.matching.codec import decode_artefact, encode_artefact
from guardrail.matching.combined import CombinedArtefact
from guardrail.matching.compiler import COMPILER_VERSION, artefact_key, compile_artefact, compile_request_artefact
from guardrail.matching.obfuscation import Obfuscation
from guardrail.matching.obfuscation.automaton import ObfuscationAutomaton
from guardrail.matching.obfuscation.nfa import ObfuscationNfa
from guardrail.matching.textmatch import TextMatcher
from guardrail.matching.token_matcher import TokenMatcher
from guardrail.wordlists.wordlist import bundled_wordlist, with_obfuscation, wordlist_from_terms

DATA = load_data("obfuscation_cases.json")
SETTING = Obfuscation.parse("masked+markup")
STORED = with_obfuscation([bundled_wordlist("en")], SETTING)
OWN = with_obfuscation([wordlist_from_terms(["sorry", "rainbow", "teacher"])], SETTING)
#: Fragments of the random texts: every obfuscated form of the set, clean traps, request terms in several
#: forms, and the glue around words (single letters and separators are what the spaced view reads).
FRAGMENTS = ([case["text"] for case in DATA["cases"]] + [trap["text"] for trap in DATA["traps"]]
             + ["s0rry", "r a i n b o w", "raınbow", "t.e.a.c.h.e.r", "sooorry", " ", ", ", ". ", " I ", " a ",
                "x", "<i>", "&amp;", "**", "-", "_"])


@pytest.fixture(scope="module", params=["smollm2", "gemma3"])
def model_name(request):
    return request.param


@pytest.fixture(scope="module", params=["stored", "request", "combined"])
def setup(model_name, request):
    tokenizer = request.getfixturevalue(f"{model_name}_tokenizer")
    vocab = request.getfixturevalue(f"{model_name}_vocab")
    if request.param == "stored":
        artefact = compile_artefact(vocab, [*STORED, *OWN])
    elif request.param == "request":
        artefact = compile_request_artefact(vocab, [*STORED, *OWN])
    else:
        artefact = CombinedArtefact(compile_artefact(vocab, STORED),
                                    compile_request_artefact(vocab, OWN, alongside=STORED))
    return tokenizer, vocab, artefact, TextMatcher([*STORED, *OWN])


def split_encode(tokenizer, text: str, rng: random.Random) -> list[int]:
    """``text`` tokenized as independently encoded pieces cut at random points (a non-canonical split)."""
    cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(0, 5)))) if len(text) > 1 else []
    ids, last = [], 0
    for cut in [*cuts, len(text)]:
        ids += tokenizer.encode(text[last:cut], add_special_tokens=False)
        last = cut
    return ids


def random_text(rng: random.Random) -> str:
    return "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(1, 4)))


def test_tokens_find_what_the_text_contract_finds(setup):
    tokenizer, _, artefact, matcher = setup
    rng = random.Random(18)
    flagged = 0
    for _ in range(250):
        text = random_text(rng)
        ids = split_encode(tokenizer, text, rng)
        assert tokenizer.decode(ids) == text
        want = {m.term for m in matcher.scan(text)}
        assert terms_by_tokens(artefact, ids) == want, text
        flagged += bool(want)
    assert flagged > 100  # the texts do exercise the forms


def test_a_hit_rolls_back_to_the_token_where_the_form_begins_and_nothing_released_is_taken_back(setup):
    tokenizer, vocab, artefact, matcher = setup
    rng = random.Random(7)
    hits = 0
    for _ in range(250):
        text = random_text(rng)
        ids = split_encode(tokenizer, text, rng)
        token_matcher, released = TokenMatcher(artefact), 0
        for index, token in enumerate(ids + [None]):
            hit = token_matcher.push(token) if token is not None else token_matcher.finish()
            if hit is None:
                if token is None:
                    break
                released = max(released, token_matcher.releasable())
                continue
            hits += 1
            seen = tokenizer.decode(ids[:index + 1] if token is not None else ids)
            before = tokenizer.decode(ids[:hit.start_token])
            starts = [m.start for m in matcher.scan(seen) if m.term == hit.term]
            # The rollback target is at or before the form's first character, never after it...
            assert starts and len(before) <= max(starts), (text, hit, before)
            # ...and never before text that was already released.
            assert hit.start_token >= released, (text, hit, released)
            break
        # A released prefix never ends inside a UTF-8 character.
        b"".join(vocab.token_bytes[t] for t in token_matcher.tokens[:released]).decode("utf-8")
    assert hits > 100


@pytest.mark.parametrize(("text", "term"), [("what the fukc", "fuck"), ("total shti, honestly", "shit"),
                                            ("a dikc move", "dick"), ("you twta!", "twat"), ("bithc", "bitch")])
def test_the_last_two_letters_swapped_are_read_token_by_token(setup, text, term):
    """The one-edit swap at a term's end is a path of the compiled automaton, not only of the text matcher:
    canonical and split tokenizations report it."""
    tokenizer, _, artefact, matcher = setup
    assert {m.term for m in matcher.scan(text)} == {term}
    rng = random.Random(len(text))
    for ids in (tokenizer.encode(text, add_special_tokens=False), split_encode(tokenizer, text, rng)):
        assert tokenizer.decode(ids) == text
        assert terms_by_tokens(artefact, ids) == {term}, (text, ids)


def test_hold_back_costs_little_on_clean_prose(setup):
    """On clean prose the obfuscation streams hold back about as much as the literal contract (a few characters
    at the end, never the whole text): what is releasable lags the text by less than a word on average."""
    tokenizer, vocab, artefact, _ = setup
    prose = ("The committee met on Tuesday to discuss the budget. After a long debate, the members agreed to fund "
             "the new library, the bike lanes and a small park near the river. I think a b c tests are fine.")
    ids = tokenizer.encode(prose, add_special_tokens=False)
    matcher, lags = TokenMatcher(artefact), []
    for token in ids:
        assert matcher.push(token) is None
        held = b"".join(vocab.token_bytes[t] for t in matcher.tokens[matcher.releasable():])
        lags.append(len(held.decode("utf-8", "replace")))
    assert sum(lags) / len(lags) < 8, lags


def test_a_stored_artefact_reads_the_same_forms_as_a_fresh_one(smollm2_tokenizer, smollm2_vocab):
    """The codec stores each obfuscation stream's NFA as arrays; the artefact read back finds what the
    compiled one finds, on every case of the set."""
    fresh = compile_artefact(smollm2_vocab, STORED)
    key = artefact_key(smollm2_vocab, STORED)
    loaded = decode_artefact(encode_artefact(fresh, key, COMPILER_VERSION), smollm2_vocab, key, COMPILER_VERSION)
    assert [a.num_nodes for a in loaded.automata if isinstance(a, ObfuscationAutomaton)]  # streams were stored
    for case in DATA["cases"]:
        ids = smollm2_tokenizer.encode(case["text"], add_special_tokens=False)
        assert terms_by_tokens(loaded, ids) == terms_by_tokens(fresh, ids) == {case["term"]}, case


def test_stored_nfa_arrays_out_of_range_are_refused(smollm2_vocab):
    automaton = next(a for a in compile_artefact(smollm2_vocab, STORED).automata
                     if isinstance(a, ObfuscationAutomaton))
    arrays = automaton.nfa.to_arrays()
    arrays["target"] = arrays["target"].copy()
    arrays["target"][0] = len(arrays["target"]) + 5
    with pytest.raises(ValueError, match="out of range"):
        ObfuscationNfa.from_arrays(arrays)


#: Ampersands that open no character reference (the soak found "&amp" + a space sending the markup view into
#: unbounded recursion, which failed every row of the batch): each is text, and a form after it is still read.
BROKEN_REFERENCES = [("Tom &amp Jerry", set()), ("a &foo; b", set()), ("&#x z", set()), ("&& ", set()),
                     ("R&D &amp;c", set()), ("&amp sorry", {"sorry"}), ("&amp s0rry", {"sorry"}),
                     ("x &a and r a i n b o w", {"rainbow"}), ("&" + "a" * 40 + " sorry", {"sorry"})]


@pytest.mark.parametrize(("text", "terms"), BROKEN_REFERENCES)
def test_an_ampersand_that_opens_no_reference_is_text_and_what_follows_is_read(setup, text, terms):
    tokenizer, _, artefact, matcher = setup
    assert {m.term for m in matcher.scan(text)} == terms
    assert terms_by_tokens(artefact, tokenizer.encode(text, add_special_tokens=False)) == terms


def test_a_combined_artefact_holds_what_either_components_view_has_not_emitted(smollm2_tokenizer, smollm2_vocab):
    """The components' levels may differ (a request's own terms at the default level beside lists at ``off``): a
    character the request's obfuscation view still buffers leaves the pair's boundary unclean too, as it does the
    request's artefact alone (a match beginning with it rolls back to its first byte; nothing before is final)."""
    first = compile_artefact(smollm2_vocab, with_obfuscation([wordlist_from_terms(["hello"])], Obfuscation.parse("off")))
    second = compile_request_artefact(smollm2_vocab, with_obfuscation([wordlist_from_terms(["shit"])], SETTING))
    both = CombinedArtefact(first, second)
    alone, paired, plain = TokenMatcher(second), TokenMatcher(both), TokenMatcher(first)
    for token in smollm2_tokenizer.encode("a s", add_special_tokens=False):  # "s" may begin "$h1t", "s h i t"...
        for matcher in (alone, paired, plain):
            assert matcher.push(token) is None
    assert second.has_pending_bytes(alone.state) and not first.has_pending_bytes(plain.state)
    assert both.has_pending_bytes(paired.state)
