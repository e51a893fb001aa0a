"""The mask primitive: ``completing_tokens`` of a state is exactly the set of tokens whose transition from
that state completes a match — checked against a brute-force sweep of SmolLM2's whole vocab, from random
states reached by random token sequences, for several term sets (word/prefix/substring, phrases,
case-sensitive, CJK with an allow-term, regex terms), compiled with a root sweep, without one (request terms), and the
two combined at run time."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from guardrail.matching.artefact import ROOT_STATE
from guardrail.matching.combined import CombinedArtefact
from guardrail.matching.compiler import compile_artefact, compile_request_artefact
from guardrail.matching.token_matcher import TokenMatcher
from guardrail.wordlists.wordlist import MatchMode, Term, WordList, bundled_wordlist

# Out of the quick loop (make test-fast): brute-force vocab sweeps (~100 s on the 2-core machine); make test runs it.
pytestmark = pytest.mark.slow

TERM_SETS = {
    "en+request": [bundled_wordlist("en"), WordList("request", (
        Term("listen", MatchMode.WORD), Term("talk", MatchMode.WORD), Term("fuck you", MatchMode.WORD),
        Term("idiot", MatchMode.PREFIX), Term("傻逼", MatchMode.SUBSTRING), Term("奶", MatchMode.SUBSTRING)),
        allow=("牛奶",))],
    "case-sensitive": [WordList("cs", (
        Term("NaN", MatchMode.WORD, case_sensitive=True), Term("Sorry", MatchMode.PREFIX, case_sensitive=True),
        Term("sorry", MatchMode.WORD), Term("ass", MatchMode.SUBSTRING, case_sensitive=True)))],
    "phrases+symbols": [WordList("p", (
        Term("kill all humans", MatchMode.WORD), Term("c++ sucks", MatchMode.WORD), Term("$1$", MatchMode.SUBSTRING),
        Term("ab", MatchMode.SUBSTRING), Term("über", MatchMode.PREFIX), Term("é", MatchMode.WORD)))],
    "cjk+allow": [WordList("zh", (Term("傻逼", MatchMode.SUBSTRING), Term("奶", MatchMode.SUBSTRING),
                                  Term("性", MatchMode.SUBSTRING)), allow=("牛奶茶", "女性"))],
    "regex": [WordList("rx", (
        Term("s[o0]rr(?:y|ies)", MatchMode.WORD, regex=True), Term("f[u*@]ck", MatchMode.PREFIX, regex=True),
        Term("\\d{2}-\\d", MatchMode.SUBSTRING, regex=True), Term("傻.", MatchMode.SUBSTRING, regex=True),
        Term("NaN\\b", MatchMode.SUBSTRING, case_sensitive=True, regex=True),
        Term("\\Bx\\w", MatchMode.SUBSTRING, regex=True), Term("[a-z]{1,3}\\.", MatchMode.WORD, regex=True),
        Term("ab\\W{1,2}c", MatchMode.PREFIX, regex=True),
        Term("\\b-\\d", MatchMode.SUBSTRING, regex=True)))],  # begins only after a word character
    "regex+en": [bundled_wordlist("en"), WordList("request", (
        Term("s[o0]rr(?:y|ies)", MatchMode.WORD, regex=True), Term("kill\\s(?:all|every)", MatchMode.WORD, regex=True),
        Term("傻.", MatchMode.SUBSTRING, regex=True), Term("listen", MatchMode.WORD)))],
}

FRAGMENTS = ["listen", " list", "en", " talk", "fuck", " FUCK", " you", " y", "ou", "idi", "ot", " idiots", "傻",
             "逼", "牛", "奶", "茶", "女", "性", "NaN", " Na", "N", "Sorry", " sorry", "SOR", "ass", "ASS", "kill",
             " all", " hum", "ans", "c++", " sucks", "$", "$1", "1$", "ab", "a", "b", "über", " é", "e", " ", "  ", "\n",
             ".", ",", "x", "ok", "\u200b", " s", "s", "0", "rr", "ies", " f", "*", "ck", "12", "-", "3", "xx", " so",
             "rry", " kill", " every"]


@pytest.fixture(scope="module")
def artefacts(smollm2_vocab):
    """Per term set: the stored (swept) compile, the request (lazy) compile, and the two combined."""
    built = {}
    for name, lists in TERM_SETS.items():
        built[name, "stored"] = compile_artefact(smollm2_vocab, lists)
        built[name, "request"] = compile_request_artefact(smollm2_vocab, lists)
        if len(lists) == 1:  # split one list in two halves to combine
            half = len(lists[0].terms) // 2
            lists = [WordList("a", lists[0].terms[:half], lists[0].allow), WordList("b", lists[0].terms[half:])]
        built[name, "combined"] = CombinedArtefact(compile_artefact(smollm2_vocab, lists[:1]),
                                                   compile_request_artefact(smollm2_vocab, lists[1:], lists[:1]))
    return built


def brute_force(artefact, state: int) -> np.ndarray:
    return np.asarray([t for t in range(len(artefact.vocab)) if artefact.transition(state, t).hits], dtype=np.int64)


def random_state(data, tokenizer, vocab, artefact) -> int:
    """Follow a random token sequence: encoded fragments mixed with raw byte tokens (split UTF-8)."""
    state = ROOT_STATE
    for _ in range(data.draw(st.integers(0, 5))):
        if data.draw(st.integers(0, 5)) == 0:  # one byte of a multi-byte character
            char = data.draw(st.sampled_from("傻逼奶牛性éü€🙂"))
            data_bytes = char.encode()[:data.draw(st.integers(1, len(char.encode())))]
            ids = [_byte_token(vocab, b) for b in data_bytes]
        else:
            ids = tokenizer.encode(data.draw(st.sampled_from(FRAGMENTS)), add_special_tokens=False)
        for token in ids:
            state = artefact.transition(state, token).state
    return state


_BYTE_TOKENS: dict[int, int] = {}


def _byte_token(vocab, byte: int) -> int:
    if not _BYTE_TOKENS:
        for token_id, data in enumerate(vocab.token_bytes):
            if len(data) == 1:
                _BYTE_TOKENS.setdefault(data[0], token_id)
    return _BYTE_TOKENS[byte]


@pytest.mark.parametrize("kind", ["stored", "request", "combined"])
@pytest.mark.parametrize("term_set", list(TERM_SETS))
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_completing_tokens_equal_a_brute_force_vocab_sweep(artefacts, smollm2_tokenizer, smollm2_vocab,
                                                           term_set, kind, data):
    artefact = artefacts[term_set, kind]
    state = random_state(data, smollm2_tokenizer, smollm2_vocab, artefact)
    found = artefact.completing_tokens(state)
    assert found.dtype == np.int64 and np.all(np.diff(found) > 0)
    np.testing.assert_array_equal(found, brute_force(artefact, state))


@pytest.mark.parametrize("text", ["I will listen", "you are an idi", "我喝牛", "kill all", "fuck"])
def test_matcher_mask_blocks_exactly_the_completing_tokens(artefacts, smollm2_tokenizer, text):
    """Pushing a masked token reports a hit; pushing any other token does not."""
    artefact = artefacts["en+request", "stored"]
    matcher = TokenMatcher(artefact)
    for token in smollm2_tokenizer.encode(text, add_special_tokens=False):
        matcher.push(token)
    mask = matcher.completing_tokens()
    assert mask is matcher.completing_tokens()  # memoised per state
    masked = set(mask.tolist())
    for token in list(masked)[:50] + [t for t in range(0, len(artefact.vocab), 97) if t not in masked]:
        before = len(matcher)
        hit = matcher.push(token)
        assert (hit is not None) == (token in masked), (text, token)
        matcher.rollback_to(before)


def test_a_pending_right_boundary_masks_every_token_starting_with_a_non_word_character(artefacts,
                                                                                       smollm2_tokenizer):
    """After "listen" the word term completes on the next non-word character: " ", ".", "\\n" are masked,
    letters are not (the weaker guarantee of mask-only engines: the end of text also completes it)."""
    artefact = artefacts["en+request", "stored"]
    matcher = TokenMatcher(artefact)
    for token in smollm2_tokenizer.encode("I will listen", add_special_tokens=False):
        assert matcher.push(token) is None
    masked = set(matcher.completing_tokens().tolist())
    encode = smollm2_tokenizer.encode
    assert {encode(t, add_special_tokens=False)[0] for t in (" now", ".", "\n", ",")} <= masked
    assert not {encode(t, add_special_tokens=False)[0] for t in ("ing", "er", "s")} & masked


@pytest.mark.parametrize("kind", ["request", "combined"])
@pytest.mark.parametrize("text", ["Please listen", "you idiots", "oh FUCK you all", "I will TALK now", "傻逼"])
def test_retry_bans_without_a_sweep_equal_those_of_the_stored_compile(artefacts, smollm2_tokenizer, kind, text):
    """After a hit and its rollback, the tokens banned with the first one do not depend on how the terms
    were compiled (the request artefact finds its candidates in the token-text index)."""
    bans = {}
    for how in ("stored", kind):
        matcher = TokenMatcher(artefacts["en+request", how])
        ids = smollm2_tokenizer.encode(text + ".", add_special_tokens=False)
        hit = next(h for h in (matcher.push(t) for t in ids) if h is not None)
        matcher.rollback_to(hit.start_token)
        bans[how] = (hit.term, matcher.retry_bans(hit))
    assert bans[kind] == bans["stored"]
