"""The text contract: the pyahocorasick matcher equals a naive regex reference over normalised text."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guardrail.matching.normalize import normalize_term, normalize_with_offsets
from guardrail.matching.textmatch import TextMatcher
from guardrail.sized_cache import deep_sizeof
from guardrail.wordlists.wordlist import MatchMode, Term, WordList, bundled_wordlist, wordlist_from_terms

ALPHABET = "abcé ß-\n\tAB牛奶\u200b\u00a0ﬁ"


def regex_reference(wordlist: WordList, text: str) -> set[tuple[str, int, int]]:
    """Every (term, start, end) in original-text coordinates, by brute-force regex with lookarounds."""
    found = set()
    for case_sensitive in (False, True):
        norm, offsets = normalize_with_offsets(text, case_sensitive)
        allowed = []
        for allow in wordlist.allow:
            a = normalize_term(allow, case_sensitive)
            allowed += [(m.start(), m.start() + len(a)) for m in re.finditer(f"(?=({re.escape(a)}))", norm)]
        for term in wordlist.terms:
            if term.case_sensitive != case_sensitive:
                continue
            t = normalize_term(term.text, case_sensitive)
            left = r"(?<!\w)" if term.match != MatchMode.SUBSTRING and re.match(r"\w", t[0]) else ""
            right = r"(?!\w)" if term.match == MatchMode.WORD and re.match(r"\w", t[-1]) else ""
            for m in re.finditer(f"(?=({left}{re.escape(t)}{right}))", norm):
                start, end = m.start(1), m.end(1)
                if term.match == MatchMode.SUBSTRING and any(a <= start and end <= b for a, b in allowed):
                    continue
                found.add((term.text, offsets[start], offsets[end - 1] + 1))
    return found


terms_strategy = st.lists(
    st.builds(Term, st.text("abcé-ß牛奶 ", min_size=1, max_size=4).map(str.strip).filter(lambda s: any(c.isalnum() for c in s)),
              st.sampled_from(list(MatchMode)), st.booleans()),
    min_size=1, max_size=4, unique_by=lambda t: (t.text, t.case_sensitive))


@settings(max_examples=400, deadline=None)
@given(terms=terms_strategy, allow=st.lists(st.text("abc牛奶", min_size=2, max_size=4), max_size=2),
       text=st.text(ALPHABET, max_size=16))
def test_matcher_equals_regex_reference(terms, allow, text):
    wordlist = WordList("x", tuple(terms), tuple(allow))
    got = {(m.term, m.start, m.end) for m in TextMatcher([wordlist]).scan(text)}
    assert got == regex_reference(wordlist, text)


def test_phrase_matches_any_whitespace_and_case():
    matcher = TextMatcher([wordlist_from_terms(["fuck you"])])
    for text in ("FUCK  YOU", "Fuck\nyou", "fuck\u00a0\tyou!", "ｆｕｃｋ you"):
        assert [m.term for m in matcher.scan(text)] == ["fuck you"], text
    assert matcher.scan("fuck-you") == []


def test_word_mode_needs_boundaries_and_prefix_mode_continues():
    wordlist = WordList("x", (Term("ass", MatchMode.WORD), Term("idiot", MatchMode.PREFIX)))
    matcher = TextMatcher([wordlist])
    assert matcher.scan("a class act") == []
    assert [(m.start, m.end) for m in matcher.scan("kiss my ass")] == [(8, 11)]
    assert [m.term for m in matcher.scan("idiotic idiots")] == ["idiot", "idiot"]
    assert matcher.scan("an anti-idiot") != []  # '-' is a boundary
    assert matcher.scan("myidiot") == []


def test_zero_width_characters_do_not_split_a_term():
    matcher = TextMatcher([wordlist_from_terms(["shit"])])
    assert [m.start for m in matcher.scan("oh s\u200bh\u00adit")] == [3]


def test_allow_term_covers_substring_occurrence():
    wordlist = WordList("zh", (Term("奶", MatchMode.SUBSTRING),), ("牛奶",))
    matcher = TextMatcher([wordlist])
    assert matcher.scan("我喝牛奶") == []
    assert [m.start for m in matcher.scan("奶牛奶")] == [0]


def test_spans_index_the_original_text():
    text = "Well, ＦＵＣＫ   YOU."
    (match,) = TextMatcher([wordlist_from_terms(["fuck you"])]).scan(text)
    assert text[match.start:match.end] == "ＦＵＣＫ   YOU"


@pytest.mark.parametrize("names", [("en",), ("en", "de")])
def test_the_size_estimate_the_service_caches_by_is_within_a_factor_of_two_of_a_full_walk(names):
    matcher = TextMatcher([bundled_wordlist(name) for name in names])
    walked = deep_sizeof(matcher)
    assert walked / 2 <= matcher.approx_bytes() <= walked * 2
