"""The obfuscation levels on text (``TextMatcher``, the ``/v1/check`` and ``guardrail check`` engine): every form
of the project's set is caught at the level that claims it, clean texts are not, and the settings parse,
resolve and round-trip as documented (docs/matching.md, "Obfuscation")."""

from __future__ import annotations

import pytest
from helpers.paths import load_data

from guardrail.matching.obfuscation import DEFAULT_OBFUSCATION, Obfuscation, ObfuscationLevel, effective
from guardrail.matching.textmatch import TextMatcher
from guardrail.wordlists.wordlist import (
    MatchMode,
    Term,
    WordListError,
    bundled_wordlist,
    format_wordlist,
    parse_wordlist,
    with_obfuscation,
    wordlist_digest,
    wordlist_from_terms,
)

DATA = load_data("obfuscation_cases.json")
CASES = DATA["cases"]
EN = bundled_wordlist("en")
LEVELS = [str(Obfuscation(level, markup)) for level in ObfuscationLevel for markup in (False, True)]


@pytest.fixture(scope="module")
def matchers():
    return {setting: TextMatcher([EN], obfuscation=setting) for setting in LEVELS}


def claims(setting: str, case: dict) -> bool:
    """Whether ``setting`` claims the case's form: its level at least the case's, and markup when needed."""
    need = Obfuscation.parse(case["level"])
    have = Obfuscation.parse(setting)
    return have.level >= need.level and (have.markup or not need.markup)


def found_terms(matcher: TextMatcher, text: str) -> set[str]:
    return {m.term for m in matcher.scan(text)}


def test_the_set_covers_every_form_with_at_least_twelve_terms():
    forms = {case["form"] for case in CASES}
    assert {"homoglyph", "diacritic", "default_ignorable", "leet", "spaced", "dotted", "hyphenated", "underscored",
            "stretched", "censored", "markup_html", "markup_entity", "markup_emphasis"} <= forms
    for form in forms:
        assert len({c["term"] for c in CASES if c["form"] == form}) >= 12, form


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['form']}:{c['term']}")
def test_each_form_is_caught_at_the_level_that_claims_it_and_not_below(matchers, case):
    for setting, matcher in matchers.items():
        caught = case["term"] in found_terms(matcher, case["text"])
        if claims(setting, case):
            assert caught, (setting, case["text"])
        elif case["form"] != "default_ignorable":  # invisible characters are dropped at every level
            assert not caught, (setting, case["text"])


@pytest.mark.parametrize("trap", DATA["traps"], ids=lambda t: t["text"][:30])
def test_clean_texts_are_not_flagged_at_any_level(matchers, trap):
    for setting, matcher in matchers.items():
        assert matcher.scan(trap["text"]) == [], (setting, trap)


def test_the_span_covers_the_form_as_written():
    matcher = TextMatcher([EN], obfuscation=DEFAULT_OBFUSCATION)
    text = "well f.u.c.k that and a$$hole, fuuuuck f<b>u</b>ck"
    spans = [(m.term, text[m.start:m.end]) for m in matcher.scan(text)]
    assert spans == [("fuck", "f.u.c.k"), ("asshole", "a$$hole"), ("fuck", "fuuuuck"), ("fuck", "f<b>u</b>ck")]


@pytest.mark.parametrize("text", ["t i t l e", "c l a s s", "b a s s", "as", "45s", "the 717 bus", "rapping",
                                  "Bonner", "assess", "a.m. and p.m."])
def test_the_rules_keep_look_alikes_of_clean_words_clean(text):
    assert TextMatcher([EN], obfuscation="masked+markup").scan(text) == []


def test_a_literal_occurrence_beside_a_single_letter_is_still_caught():
    """The spaced view joins only runs of two or more single letters: "I shit" keeps its word."""
    matcher = TextMatcher([EN], obfuscation="masked+markup")
    assert [m.term for m in matcher.scan("I shit you not")] == ["shit"]
    assert [m.term for m in matcher.scan("what the f u c k you")] == ["fuck"]


def test_a_stretched_letter_is_three_or_more_and_a_double_letter_stays_double():
    matcher = TextMatcher([wordlist_from_terms(["ass", "raping"])], obfuscation="spaced")
    assert found_terms(matcher, "you asssss") == {"ass"}
    assert found_terms(matcher, "you as") == set()
    assert found_terms(matcher, "he was rappping") == {"raping"}
    assert found_terms(matcher, "he was rapping") == set()


def test_an_accented_text_letter_matches_a_plain_term_letter_but_not_the_reverse():
    lists = [wordlist_from_terms(["coño", "fuck"], name="es")]
    matcher = TextMatcher(lists, obfuscation="homoglyphs")
    assert found_terms(matcher, "fúck") == {"fuck"}
    assert found_terms(matcher, "coño") == {"coño"}
    assert found_terms(matcher, "cono") == set()


def test_default_ignorable_code_points_split_no_word_even_at_off():
    matcher = TextMatcher([EN])
    for mark in ("\U000e0072", "\ufe0f", "\u180b", "\u034f", "\u3164", "\u2060"):
        assert found_terms(matcher, f"f{mark}uck") == {"fuck"}, hex(ord(mark))


def test_terms_the_levels_exempt_keep_the_literal_contract():
    assert effective(Obfuscation.parse("masked"), "ass").level is ObfuscationLevel.MASKED
    assert effective(Obfuscation.parse("masked"), "no").off  # fewer than three letters
    assert effective(Obfuscation.parse("masked"), "aaa").off  # one distinct letter
    assert effective(Obfuscation.parse("masked"), "fuck you").level is ObfuscationLevel.HOMOGLYPHS  # a phrase
    lists = [wordlist_from_terms([Term("SHIT", MatchMode.WORD, case_sensitive=True), Term("s[h]it", MatchMode.WORD,
                                                                                        regex=True)])]
    assert TextMatcher(lists, obfuscation="masked").scan("sh1t S.H.I.T") == []


def test_precedence_term_over_list_over_request():
    text = "sh1t f.u.c.k"
    listed = parse_wordlist("@obfuscation leet\nshit\nfuck\n", "mine")
    assert listed.obfuscation == "leet"
    assert found_terms(TextMatcher([listed], obfuscation="off"), text) == {"shit"}  # the list's level wins
    own = parse_wordlist("shit | obfuscation=off\nfuck\n", "mine")
    assert found_terms(TextMatcher([own], obfuscation="spaced"), text) == {"fuck"}  # the term's wins
    assert found_terms(TextMatcher([own]), text) == set()  # nothing set anywhere: off


def test_settings_round_trip_and_change_the_digest():
    listed = parse_wordlist("@obfuscation masked+markup\nshit | obfuscation=leet\nfuck\n", "mine")
    assert parse_wordlist(format_wordlist(listed), "mine") == listed
    plain = parse_wordlist("shit\nfuck\n", "mine")
    digests = {wordlist_digest([plain]), wordlist_digest([listed]), wordlist_digest(with_obfuscation([plain], "leet"))}
    assert len(digests) == 3


@pytest.mark.parametrize("line,reason", [
    ("@obfuscation loud\nshit\n", "invalid value"),
    ("shit\n@obfuscation leet\n", "before the first term"),
    ("shit | obfuscation=leet+bold\n", "invalid value"),
])
def test_bad_settings_are_refused_naming_the_line(line, reason):
    with pytest.raises(WordListError, match=reason) as info:
        parse_wordlist(line, "mine", source="mine.txt")
    assert info.value.line is not None


@pytest.mark.parametrize("value", ["", "loud", "masked+", "leet+markup+markup", "+markup"])
def test_obfuscation_parse_names_the_accepted_values(value):
    with pytest.raises(ValueError, match="off, homoglyphs, leet, spaced, masked"):
        Obfuscation.parse(value)


def test_obfuscation_parse_round_trips():
    for setting in LEVELS:
        assert str(Obfuscation.parse(setting)) == setting
    assert Obfuscation.parse(" Masked+Markup ") == DEFAULT_OBFUSCATION


@pytest.mark.parametrize("text", ["Tom &amp Jerry", "a &foo; b", "&#x z", "&& ", "&" * 50, "&amp " * 20])
def test_an_ampersand_that_opens_no_reference_is_read_as_text(text):
    matcher = TextMatcher([EN], obfuscation=DEFAULT_OBFUSCATION)
    assert matcher.scan(text) == []
    assert [m.term for m in matcher.scan(text + " and f.u.c.k")] == ["fuck"]  # and the view reads on after it
