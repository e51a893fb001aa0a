"""The compile budget of regex terms (guardrail/matching/regex/automaton.py): a deadline stops the subset
construction as states are added, and the term over the state limit is found by bisection."""

from __future__ import annotations

import time

import pytest

from guardrail.matching.regex.automaton import CompileBudgetExceeded, check_regex_terms
from guardrail.wordlists.wordlist import WordListError, wordlist_from_terms

LETTERS = "abcdefghijklmnopqrstuvwxyz"


def overlapping(count: int) -> list[str]:
    """``count`` distinct terms like ``re:bcd.{0,15}e``: each compiles alone (~900 states), together they need
    more than 10,000."""
    return [f"re:{LETTERS[i % 26]}{LETTERS[(i + 1) % 26]}{LETTERS[(i + 2) % 26]}.{{0,{15 - i // 26}}}"
            f"{LETTERS[(i + 3) % 26]}" for i in range(count)]


def test_a_passed_deadline_stops_the_compile():
    wordlist = wordlist_from_terms(overlapping(4))
    with pytest.raises(CompileBudgetExceeded) as caught:
        check_regex_terms(wordlist, 10_000, deadline=time.monotonic() - 1)
    assert caught.value.construct == "compile time"


def test_bisection_names_the_one_term_over_the_limit_among_many():
    terms = [f"re:w{c}rd[0-9]" for c in LETTERS[:20]]
    terms.insert(13, "re:a.{0,40}b")
    with pytest.raises(WordListError) as caught:
        check_regex_terms(wordlist_from_terms(terms), 10_000)
    assert caught.value.line == 14 and "'re:a.{0,40}b'" in caught.value.reason


def test_terms_that_compile_alone_but_not_together_name_no_term():
    with pytest.raises(WordListError) as caught:
        check_regex_terms(wordlist_from_terms(overlapping(40)), 10_000)
    assert caught.value.line is None and "together" in caught.value.reason
