"""The obfuscation levels on text (``TextMatcher``, the ``/v1/check`` and ``guardrail check`` engine): every form
of the project's set is caught at the level that claims it, clean texts are not, and the settings parse,
resolve and round-trip as documented (docs/matching.md, "Obfuscation")."""

from __future__ import annotations

import pytest
from helpers.paths import load_data

from guardrail.matching.obfuscation import DEFAULT_OBFUSCATION, OFF, Obfuscation, ObfuscationLevel, effective
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
    return {setting: TextMatcher([EN], obfuscation=Obfuscation.parse(setting)) for setting in LEVELS}


def claims(setting: str, case: dict) -> bool:
    """Whether ``setting`` claims the case's form: its level at least the case's, and markup when needed."""
    need = Obfuscation.parse(case["level"])
    have = Obfuscation.parse(setting)
    return have.level >= need.level and (have.markup or not need.markup)


def found_terms(matcher: TextMatcher, text: str) -> set[str]:
    return {m.term for m in matcher.scan(text)}


#: The forms every term of the set has; the forms of the rules that spare real words or need a long or short
#: term (doubled letters, censor runs, look-alike symbols, one edit, one real letter) have what fits.
CORE_FORMS = {"homoglyph", "diacritic", "default_ignorable", "leet", "spaced", "dotted", "hyphenated", "underscored",
              "stretched", "censored", "markup_html", "markup_entity", "markup_emphasis"}
RULE_FORMS = {"doubled": 12, "censored_run": 10, "symbol": 6, "one_edit": 3, "one_real_letter": 1}


def test_the_set_covers_every_form_with_enough_terms():
    forms = {case["form"] for case in CASES}
    assert forms == CORE_FORMS | set(RULE_FORMS)
    for form in forms:
        assert len({c["term"] for c in CASES if c["form"] == form}) >= RULE_FORMS.get(form, 12), form


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


@pytest.mark.parametrize("text,form", [("&quot;queef", "queef"), ("<b>boob", "boob"), ("bo<b>o</b>b", "bo<b>o</b>b"),
                                       ("x sh&#105;t x", "sh&#105;t"), ("**fuck**", "fuck"), ("SUCKK", "SUCKK")])
def test_the_span_points_at_the_term_through_markup_and_references(text, form):
    spans = {text[m.start:m.end] for m in TextMatcher([EN], obfuscation=DEFAULT_OBFUSCATION).scan(text)}
    assert spans == {form}


@pytest.mark.parametrize("text", ["t i t l e", "c l a s s", "b a s s", "as", "45s", "the 717 bus", "rapping",
                                  "Bonner", "assess", "a.m. and p.m."])
def test_the_rules_keep_look_alikes_of_clean_words_clean(text):
    assert TextMatcher([EN], obfuscation=Obfuscation.parse("masked+markup")).scan(text) == []


def test_a_literal_occurrence_beside_a_single_letter_is_still_caught():
    """The spaced view joins only runs of two or more single letters: "I shit" keeps its word."""
    matcher = TextMatcher([EN], obfuscation=Obfuscation.parse("masked+markup"))
    assert [m.term for m in matcher.scan("I shit you not")] == ["shit"]
    assert [m.term for m in matcher.scan("what the f u c k you")] == ["fuck"]


def test_a_doubled_letter_reads_as_the_term_unless_the_doubled_spelling_is_a_real_word():
    matcher = TextMatcher([wordlist_from_terms(["ass", "raping", "anal", "suck"])], obfuscation=Obfuscation.parse("spaced"))
    assert found_terms(matcher, "you asssss") == {"ass"}
    assert found_terms(matcher, "you as") == set()  # a double letter of the term is never read as one
    assert found_terms(matcher, "he was rappping") == {"raping"}  # stretched: three or more
    assert found_terms(matcher, "he was rapping") == set()  # "rapping" is a word
    assert found_terms(matcher, "the annals of history") == set()  # "annal" is a word
    assert found_terms(matcher, "Anall suuck SUCKK") == {"anal", "suck"}


def test_a_one_letter_word_beside_a_form_does_not_hide_it():
    matcher = TextMatcher([EN], obfuscation=DEFAULT_OBFUSCATION)
    for text in ["you're a f*ck.", "what a f-u-c-k!", "I f*ck up", "u f*ck", "it is a b!tch", "A f u c k and a f u c k",
                 "I f-u-c-k up", "x f u c k", "s h i t x"]:
        assert found_terms(matcher, text) & {"fuck", "bitch", "shit"}, text
    assert [m.term for m in matcher.scan("A f u c k and a f u c k")] == ["fuck", "fuck"]


def test_a_letter_beside_a_spaced_form_is_not_read_into_a_real_word():
    matcher = TextMatcher([EN], obfuscation=DEFAULT_OBFUSCATION)
    for text in ["a m o n g", "p a s s", "g r a p e", "s p i c e", "c o c k y", "e s s e x"]:
        assert matcher.scan(text) == [], text


def test_censor_runs_are_read_only_where_one_term_fits():
    lists = [wordlist_from_terms(["fuck", "shit", "slut", "bitch"])]
    matcher = TextMatcher(lists, obfuscation=Obfuscation.parse("masked"))
    assert found_terms(matcher, "f**k off") == {"fuck"}
    assert found_terms(matcher, "you f***") == {"fuck"}  # a run to the end: three letters or more
    assert found_terms(matcher, "b***h") == {"bitch"}
    assert found_terms(matcher, "s**t") == set()  # shit and slut both fit
    assert found_terms(TextMatcher([wordlist_from_terms(["shit"])], obfuscation=Obfuscation.parse("masked")), "s**t") == {"shit"}


def test_one_edit_forms_of_long_terms_spare_real_words():
    matcher = TextMatcher([wordlist_from_terms(["masturbation", "swinger", "bastard"])], obfuscation=Obfuscation.parse("masked"))
    assert found_terms(matcher, "masturbaton and bastrd and basatrd") == {"masturbation", "bastard"}
    assert found_terms(matcher, "the singer sang") == set()  # a real word one edit from "swinger"
    assert found_terms(TextMatcher([wordlist_from_terms(["bastard"])], obfuscation=Obfuscation.parse("spaced")), "bastrd") == set()


def test_one_edit_forms_swap_the_last_two_letters_too():
    """Damerau's adjacent transposition at a term's end (``fukc``), under the same checks as the other edits."""
    terms = ["fuck", "shit", "twat", "rape", "shota", "penis", "cunt"]
    matcher = TextMatcher([wordlist_from_terms(terms)], obfuscation=Obfuscation.parse("masked"))
    assert found_terms(matcher, "fukc this shti, you twta") == {"fuck", "shit", "twat"}
    assert found_terms(matcher, "a raep joke") == {"rape"}
    assert found_terms(matcher, "the farmer fed the shoat") == set()  # real words: shota, penis swapped at the end
    assert found_terms(matcher, "pensi") == set()
    assert found_terms(matcher, "cutn") == set()  # an edit in the first three letters that begins like "cut"
    assert found_terms(TextMatcher([wordlist_from_terms(terms)], obfuscation=Obfuscation.parse("spaced")), "fukc") == set()


def test_a_short_term_with_one_real_letter_is_caught_but_not_as_a_number():
    matcher = TextMatcher([wordlist_from_terms(["ass"])], obfuscation=Obfuscation.parse("leet"))
    assert found_terms(matcher, "kiss my a$$, 4ss and @ss") == {"ass"}
    assert [text for text in ("a55", "45s", "Galaxy A55") if matcher.scan(text)] == []


def test_look_alike_symbols_read_as_letters():
    matcher = TextMatcher([wordlist_from_terms(["bitch", "fuck"])], obfuscation=Obfuscation.parse("leet"))
    assert found_terms(matcher, "b¡tch and f∪ck") == {"bitch", "fuck"}
    assert TextMatcher([wordlist_from_terms(["bitch"])], obfuscation=Obfuscation.parse("homoglyphs")).scan("b¡tch") == []


def test_combining_sequences_read_as_the_reader_sees_them():
    from guardrail.wordlists.wordlist import bundled_wordlist as bundled

    ja = TextMatcher([bundled("ja")])
    assert [m.term for m in ja.scan("ｵｯﾊﾟｲ")] == ["オッパイ"]  # halfwidth ﾊ + ﾟ composes to パ
    ar = TextMatcher([bundled("ar")])
    assert {m.term for m in ar.scan("سَكس")} == {"سكس"}  # the fatha is dropped: the word is not broken
    es = TextMatcher([wordlist_from_terms(["coño", "fuck"])], obfuscation=Obfuscation.parse("homoglyphs"))
    assert found_terms(es, "con\u0303o fu\u0301ck") == {"coño", "fuck"}  # decomposed accents
    assert found_terms(es, "cono") == set()


def test_an_accented_text_letter_matches_a_plain_term_letter_but_not_the_reverse():
    lists = [wordlist_from_terms(["coño", "fuck"], name="es")]
    matcher = TextMatcher(lists, obfuscation=Obfuscation.parse("homoglyphs"))
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
    assert effective(Obfuscation.parse("masked"), "fuck you").level is ObfuscationLevel.MASKED  # a phrase: word by word
    assert effective(Obfuscation.parse("masked"), "f-ck you").level is ObfuscationLevel.HOMOGLYPHS  # a symbol
    lists = [wordlist_from_terms([Term("SHIT", MatchMode.WORD, case_sensitive=True), Term("s[h]it", MatchMode.WORD,
                                                                                        regex=True)])]
    assert TextMatcher(lists, obfuscation=Obfuscation.parse("masked")).scan("sh1t S.H.I.T") == []


def test_precedence_term_over_list_over_request():
    text = "sh1t f.u.c.k"
    listed = parse_wordlist("@obfuscation leet\nshit\nfuck\n", "mine")
    assert listed.obfuscation == Obfuscation.parse("leet")
    assert found_terms(TextMatcher([listed], obfuscation=OFF), text) == {"shit"}  # the list's level wins
    own = parse_wordlist("shit | obfuscation=off\nfuck\n", "mine")
    assert found_terms(TextMatcher([own], obfuscation=Obfuscation.parse("spaced")), text) == {"fuck"}  # the term's wins
    assert found_terms(TextMatcher([own], obfuscation=OFF), text) == set()  # off where the term does not set one
    assert found_terms(TextMatcher([own]), text) == {"fuck"}  # nothing named: DEFAULT_OBFUSCATION


def test_settings_round_trip_and_change_the_digest():
    listed = parse_wordlist("@obfuscation masked+markup\nshit | obfuscation=leet\nfuck\n", "mine")
    assert parse_wordlist(format_wordlist(listed), "mine") == listed
    plain = parse_wordlist("shit\nfuck\n", "mine")
    digests = {wordlist_digest([plain]), wordlist_digest([listed]),
               wordlist_digest(with_obfuscation([plain], Obfuscation.parse("leet")))}
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


@pytest.mark.parametrize(("value", "part"), [("maskd+markup", "unknown level 'maskd'"), ("leet+bold", "unknown switch 'bold'"),
                                             ("masked+", "unknown switch ''"), ("", "unknown level ''")])
def test_obfuscation_parse_names_the_bad_part(value, part):
    with pytest.raises(ValueError, match=part):
        Obfuscation.parse(value)


def test_obfuscation_is_parsed_once_and_passed_typed():
    assert Obfuscation.parse(" Masked + Markup ") == DEFAULT_OBFUSCATION
    with pytest.raises(TypeError):
        Obfuscation.parse(DEFAULT_OBFUSCATION)  # type: ignore[arg-type]  # already typed: nothing to parse
    with pytest.raises(TypeError, match="Obfuscation.parse"):
        with_obfuscation([wordlist_from_terms(["shit"])], "leet")  # type: ignore[arg-type]  # a string below the edge


def test_obfuscation_parse_round_trips():
    for setting in LEVELS:
        assert str(Obfuscation.parse(setting)) == setting
    assert Obfuscation.parse(" Masked+Markup ") == DEFAULT_OBFUSCATION


@pytest.mark.parametrize("text", ["Tom &amp Jerry", "a &foo; b", "&#x z", "&& ", "&" * 50, "&amp " * 20])
def test_an_ampersand_that_opens_no_reference_is_read_as_text(text):
    matcher = TextMatcher([EN], obfuscation=DEFAULT_OBFUSCATION)
    assert matcher.scan(text) == []
    assert [m.term for m in matcher.scan(text + " and f.u.c.k")] == ["fuck"]  # and the view reads on after it
