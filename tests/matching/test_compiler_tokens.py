"""The compiled automaton, driven token by token on the real tokenizers of both bundled models, finds
exactly what the text contract finds — whatever the tokenization, casing, whitespace or byte split — for
stored lists, for request terms compiled without a vocab sweep, and for the two combined at run time."""

from __future__ import annotations

import collections
import random

import pytest
from helpers.tokens import byte_start_of_token, encode, encode_split, first_hit, hits_after_hold_back
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from guardrail.matching.artefact import ROOT_STATE
from guardrail.matching.combined import CombinedArtefact
from guardrail.matching.compiler import compile_artefact, compile_request_artefact
from guardrail.matching.obfuscation import OFF  # the artefacts here compile the lists as they are
from guardrail.matching.textmatch import TextMatcher
from guardrail.matching.token_matcher import TokenMatcher
from guardrail.wordlists.wordlist import MatchMode, Term, WordList, bundled_wordlist

TOKENIZERS = ["smollm2", "gemma3"]

REQUEST = WordList("request", (
    Term("listen", MatchMode.WORD), Term("talk", MatchMode.WORD), Term("sorry", MatchMode.WORD),
    Term("fuck you", MatchMode.WORD), Term("idiot", MatchMode.PREFIX), Term("傻逼", MatchMode.SUBSTRING),
    Term("奶", MatchMode.SUBSTRING)), allow=("牛奶",))


@pytest.fixture(scope="module", params=TOKENIZERS)
def model_name(request):
    return request.param


@pytest.fixture(scope="module", params=["stored", "request", "combined"])
def compiled_as(request):
    """How the lists are compiled: all swept and cached (``stored``), all as request terms without a sweep
    (``request``), or the stored list swept and the request's terms compiled apart, combined at run time."""
    return request.param


def compile_lists(vocab, stored, own, compiled_as):
    if compiled_as == "stored":
        return compile_artefact(vocab, [*stored, *own])
    if compiled_as == "request":
        return compile_request_artefact(vocab, [*stored, *own])
    return CombinedArtefact(compile_artefact(vocab, stored), compile_request_artefact(vocab, own, alongside=stored))


@pytest.fixture(scope="module")
def setup(model_name, compiled_as, request):
    tokenizer = request.getfixturevalue(f"{model_name}_tokenizer")
    vocab = request.getfixturevalue(f"{model_name}_vocab")
    wordlists = [bundled_wordlist("en"), REQUEST]
    artefact = compile_lists(vocab, wordlists[:1], wordlists[1:], compiled_as)
    return tokenizer, vocab, wordlists, artefact, TextMatcher(wordlists, obfuscation=OFF)


def drive_all(artefact, ids):
    """Follow every token (never stopping at a hit) and return the terms matched, with multiplicity."""
    state, terms = ROOT_STATE, []
    for token in ids:
        transition = artefact.transition(state, token)
        terms += [artefact.terms[t].text for t, _, _ in transition.hits]
        state = transition.state
    terms += [artefact.terms[t].text for t, _, _ in artefact.finish(state).hits]
    return collections.Counter(terms)


FRAGMENTS = ["fuck", "FUCK", "Fuck", " you", "  YOU", "\nyou", " sorry", "Sorry", "SOR", "ry", " li", "sten",
             "talk", " idiot", "ic", "s", " class", " ass", "ASS", "hole", "傻", "逼", "牛", "奶", " ", ",", ".",
             "é", "ß", "🙂", "\u200b", "\t", "-", "x", "ok"]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_automaton_equals_text_contract_on_random_tokenizations(setup, data):
    tokenizer, vocab, _, artefact, matcher = setup
    text = "".join(data.draw(st.lists(st.sampled_from(FRAGMENTS), max_size=10)))
    cuts = data.draw(st.lists(st.integers(0, max(len(text), 1)), max_size=6))
    ids = encode_split(tokenizer, text, cuts)
    decoded = b"".join(vocab.token_bytes[t] for t in ids).decode("utf-8", "replace")
    assert decoded == text
    expected = collections.Counter(m.term for m in matcher.scan(text))
    assert drive_all(artefact, ids) == expected


CASINGS = [str.lower, str.upper, str.title, lambda s: "".join(c.upper() if i % 2 else c for i, c in enumerate(s))]


@pytest.mark.parametrize("term", ["listen", "sorry", "fuck you", "idiots", "asshole", "傻逼"])
def test_every_split_and_casing_of_a_term_is_caught_where_it_begins(setup, term):
    tokenizer, vocab, _, artefact, _ = setup
    for casing in CASINGS:
        written = casing(term)
        for before, after in (("Well, ", " today."), ("", ""), ("(", ")")):
            text = before + written + after
            start_byte = len(before.encode())
            for cut in range(1, len(written)):
                ids = encode_split(tokenizer, text, [len(before) + cut])
                index, hit = first_hit(artefact, ids)
                assert hit is not None, (text, cut)
                assert byte_start_of_token(vocab, ids, hit.start_token) <= start_byte, (text, cut, hit)
                assert start_byte < byte_start_of_token(vocab, ids, hit.start_token + 1), (text, cut, hit)


@pytest.mark.parametrize("space", [" ", "  ", "\n", "\t", " \n ", "\u00a0"])
def test_phrase_with_any_whitespace_is_caught(setup, space):
    tokenizer, _, _, artefact, _ = setup
    text = f"and then FUCK{space}you all"
    for cut in range(len("and then "), len(text) - len(" all")):
        _, hit = first_hit(artefact, encode_split(tokenizer, text, [cut]))
        assert hit is not None and hit.term in {"fuck you", "fuck"}, (text, cut)


def test_overlapping_terms_are_both_found(setup):
    tokenizer, _, _, artefact, _ = setup
    counts = drive_all(artefact, encode(tokenizer, "fuck you"))
    assert counts["fuck"] == 1 and counts["fuck you"] == 1


def test_failure_link_rereads_the_mismatching_token(setup):
    """Trap 1: "li" then "talk" — a matcher that resets on mismatch without re-reading lets "talk" through."""
    tokenizer, _, _, artefact, _ = setup
    for text in ("li talk", "listalk now", "lis talk"):
        ids = encode_split(tokenizer, text, [2])
        assert drive_all(artefact, ids)["talk"] == (1 if " talk" in text else 0), text


def test_cjk_substring_term_split_into_single_bytes_is_caught(setup):
    """Trap 4: byte-level tokens carry partial UTF-8; a CJK term spans them."""
    _, vocab, _, artefact, _ = setup
    byte_token = {}
    for token_id, data in enumerate(vocab.token_bytes):
        if len(data) == 1 and token_id not in vocab.special_ids:
            byte_token.setdefault(data[0], token_id)
    text = "你是傻逼吗"
    ids = [byte_token[b] for b in text.encode()]
    index, hit = first_hit(artefact, ids)
    assert hit is not None and hit.term == "傻逼"
    start_byte = len("你是".encode())
    assert byte_start_of_token(vocab, ids, hit.start_token) == start_byte  # the first byte of 傻


def test_allow_term_suppresses_substring_inside_it(setup):
    tokenizer, _, _, artefact, _ = setup
    assert drive_all(artefact, encode(tokenizer, "我喝牛奶"))["奶"] == 0
    assert drive_all(artefact, encode(tokenizer, "奶茶"))["奶"] == 1


def test_word_term_at_the_very_end_matches_only_at_finish(setup):
    """Trap 5: the right boundary of a word term is pending until the next character or end of text."""
    tokenizer, _, _, artefact, _ = setup
    matcher = TokenMatcher(artefact)
    for token in encode(tokenizer, "I am sorry"):
        assert matcher.push(token) is None
    hit = matcher.finish()
    assert hit is not None and hit.term == "sorry"
    matcher = TokenMatcher(artefact)
    assert all(matcher.push(t) is None for t in encode(tokenizer, "I am sorryful")) and matcher.finish() is None


def test_leading_space_and_case_variants_all_hit(setup):
    """Trap 3: bad_words_ids from tokenizer(word) miss " word", "Word", "WORD"; the automaton does not."""
    tokenizer, _, _, artefact, _ = setup
    for variant in ("listen", " listen", "Listen", " LISTEN", " Listen"):
        assert drive_all(artefact, encode(tokenizer, variant))["listen"] == 1, variant


def test_rollback_to_restores_the_state_of_the_shorter_prefix(setup):
    tokenizer, _, _, artefact, _ = setup
    base = encode(tokenizer, "please")
    matcher = TokenMatcher(artefact)
    for token in base + encode(tokenizer, " li"):
        assert matcher.push(token) is None
    assert matcher.releasable() <= len(base)  # " li" may begin "listen": held back
    matcher.rollback_to(len(base))
    assert matcher.tokens == base
    hits = []
    for token in encode(tokenizer, " talk now"):
        hit = matcher.push(token)
        if hit:
            hits.append(hit)
            break
    fresh = TokenMatcher(artefact)
    expected = [fresh.push(t) for t in base + encode(tokenizer, " talk now")]
    assert hits and hits[0] == next(h for h in expected if h)


def test_a_hit_never_starts_in_a_released_token(setup):
    """Hold-back: once released, a token can never be rolled back (trap 6)."""
    tokenizer, vocab, _, artefact, _ = setup
    assert hits_after_hold_back(tokenizer, vocab, artefact, FRAGMENTS, 8, random.Random(7)) > 50


def test_always_banned_tokens_complete_a_term_by_themselves(setup):
    tokenizer, vocab, _, artefact, matcher = setup
    for token in artefact.always_banned.tolist():
        text = vocab.token_bytes[token].decode("utf-8", "replace")
        assert matcher.scan("x" + text + " ") or matcher.scan(text), text


def test_advance_is_push_then_releasable_and_a_shared_list_holds_the_tokens(setup):
    """``advance`` answers what ``push`` and ``releasable`` do one after the other; a matcher given a list keeps
    the pushed ids in it (what a guard session shares), and refuses one that is not empty."""
    tokenizer, _, _, artefact, _ = setup
    kept: list[int] = []
    one, two = TokenMatcher(artefact, kept), TokenMatcher(artefact)
    outcomes = set()
    for token in encode(tokenizer, "please li listen now, or sorry"):
        hit = two.push(token)
        answer = one.advance(token)
        if hit is not None:
            assert answer == hit
            outcomes.add("hit")
            break
        assert answer == two.releasable()
        outcomes.add("held" if answer < len(two) else "released")
    assert outcomes == {"released", "held", "hit"}
    assert kept == two.tokens == one.tokens and kept is one._tokens
    with pytest.raises(ValueError, match="start empty"):
        TokenMatcher(artefact, [1])
