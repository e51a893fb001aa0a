"""Regex terms on text: the ``re:`` syntax, the supported subset and its errors, the rewrite over normalised
text (case folding of literals and classes), the limits, and the text matcher (the DFA) against Python's
``re`` over the normalised text (the oracle, itself checked against a brute force over every (start, end))."""

from __future__ import annotations

import re

import pytest
from helpers.regex_oracle import ReferenceRegex, brute_force, patterns
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from guardrail.matching.compiler import compile_artefact, compile_request_artefact
from guardrail.matching.normalize import normalize, normalize_with_offsets
from guardrail.matching.regex.automaton import (
    MAX_REGEX_DFA_STATES,
    MAX_REQUEST_REGEX_DFA_STATES,
    RegexAutomaton,
    check_regex_terms,
)
from guardrail.matching.regex.nfa import MAX_REGEX_NFA_STATES
from guardrail.matching.regex.term import MAX_CLASS_RANGE_CODE_POINTS, normalize_pattern
from guardrail.matching.textmatch import TextMatcher
from guardrail.wordlists.regex_syntax import MAX_REGEX_SPAN, RegexError, parse_regex
from guardrail.wordlists.wordlist import (
    MatchMode,
    Term,
    WordList,
    WordListError,
    format_wordlist,
    parse_wordlist,
    split_regex_prefix,
    wordlist_digest,
    wordlist_from_terms,
    written_term,
)

# --- syntax ---------------------------------------------------------------------------------


def test_re_prefix_makes_a_regex_term_and_a_backslash_makes_it_literal():
    wordlist = parse_wordlist("re:s[o0]rry\n\\re:s[o0]rry\nre:idiot | match=prefix, case=sensitive\n", "x")
    assert wordlist.terms == (
        Term("s[o0]rry", MatchMode.WORD, regex=True),
        Term("re:s[o0]rry", MatchMode.WORD),
        Term("idiot", MatchMode.PREFIX, case_sensitive=True, regex=True),
    )
    request = wordlist_from_terms(["re:s[o0]rry", "\\re:x", "\\\\re:y", Term("re:z", MatchMode.WORD),
                                   Term("a.c", MatchMode.SUBSTRING, regex=True)])
    assert request.terms == (
        Term("s[o0]rry", MatchMode.WORD, regex=True), Term("re:x", MatchMode.WORD),
        Term("\\re:y", MatchMode.WORD), Term("re:z", MatchMode.WORD), Term("a.c", MatchMode.SUBSTRING, regex=True))
    for term in request.terms:
        assert split_regex_prefix(written_term(term)) == (term.text, term.regex)


def test_regex_terms_round_trip_through_the_file_format_and_change_the_digest():
    wordlist = WordList("x", (Term("a|b", MatchMode.WORD, regex=True), Term("foo | bar", MatchMode.PREFIX, regex=True),
                              Term("re:lit", MatchMode.WORD), Term("#h.t", MatchMode.WORD, regex=True),
                              Term("傻.", MatchMode.SUBSTRING, regex=True)))
    text = format_wordlist(wordlist)
    assert "re:a|b\n" in text and "\\re:lit\n" in text and "re:傻.\n" in text
    assert parse_wordlist(text, "x") == wordlist
    literal = WordList("x", (Term("ab", MatchMode.WORD),))
    regex = WordList("x", (Term("ab", MatchMode.WORD, regex=True),))
    assert wordlist_digest([literal]) != wordlist_digest([regex])


def test_default_match_mode_of_a_regex_follows_its_script():
    wordlist = wordlist_from_terms(["re:s.rry", "re:傻.{1,2}", "re:[一-龥]{2}"])
    assert [t.match for t in wordlist.terms] == [MatchMode.WORD, MatchMode.SUBSTRING, MatchMode.SUBSTRING]


REFUSED = [
    ("(a)\\1", "back-reference"),
    ("(?P<x>a)(?P=x)", "back-reference"),
    ("a(?=b)", "look-ahead (?=...)"),
    ("a(?!b)", "look-ahead (?!...)"),
    ("(?<=a)b", "look-behind (?<=...)"),
    ("(?<!a)b", "look-behind (?<!...)"),
    ("(a)?(?(1)b|c)", "conditional group"),
    ("(?>ab)", "atomic group"),
    ("a{1,3}+", "possessive quantifier"),
    ("^ab", "anchor ^"),
    ("ab$", "anchor $"),
    ("\\Aab", "anchor \\A"),
    ("ab\\Z", "anchor \\Z"),
    ("a+", "unbounded repetition"),
    ("ba*", "unbounded repetition"),
    ("a{2,}", "unbounded repetition"),
    ("a+?", "unbounded repetition"),
    ("(?i)ab", "inline flag (?i)"),
    ("(?i:a)b", "inline flag (?i)"),
    ("(?a)\\w", "inline flag (?a)"),
    ("a?", "empty match"),
    ("\\b", "empty match"),
    ("a|", "empty match"),
    (f"a{{1,{MAX_REGEX_SPAN + 1}}}", "span"),
    ("[a", "syntax"),
    ("a{3,1}", "syntax"),
]


@pytest.mark.parametrize(("pattern", "construct"), REFUSED)
def test_unsupported_constructs_are_refused_naming_the_term_and_the_construct(pattern, construct):
    with pytest.raises(RegexError) as caught:
        parse_regex(pattern)
    assert caught.value.construct == construct
    with pytest.raises(WordListError) as in_request:
        wordlist_from_terms(["fine", "re:" + pattern])
    assert in_request.value.line == 2 and repr("re:" + pattern) in str(in_request.value)
    assert caught.value.reason in str(in_request.value)
    with pytest.raises(WordListError) as in_file:
        parse_wordlist(f"fine\n# comment\nre:{pattern} | match=word\n", "x", source="list.txt")
    assert str(in_file.value).startswith(f"list.txt:3: term {'re:' + pattern!r}: ")
    # A list built in code without parsing is refused when compiled, naming the list and the term.
    with pytest.raises(WordListError) as compiled:
        TextMatcher([WordList("mine", (Term(pattern, MatchMode.WORD, regex=True),))])
    assert compiled.value.source == "mine" and repr("re:" + pattern) in str(compiled.value)


def test_unbounded_repetition_error_suggests_a_bound():
    with pytest.raises(RegexError, match=r"\+.*\{1,N\}"):
        parse_regex("fo+")
    with pytest.raises(RegexError, match=r"\*.*\{0,N\}"):
        parse_regex("fo*")


@pytest.mark.parametrize(("pattern", "construct"), [
    ("[aß]x", "class member"), ("[^ß]x", "class member"), ("[a\u200b]x", "class member"),
    ("[ß]x", None),  # one member: Python parses it as the literal ß, which normalises to "ss" like any literal
    ("[\u0000-\U0010ffff]", "class range"), ("x\u200b?", None),
])
def test_what_cannot_be_exact_under_folding_is_refused(pattern, construct):
    if construct is None:
        normalize_pattern(pattern, False)  # literals may normalise to several characters or to nothing
        return
    with pytest.raises(RegexError) as caught:
        normalize_pattern(pattern, False)
    assert caught.value.construct == construct


def test_a_pattern_empty_after_normalisation_is_refused():
    with pytest.raises(RegexError) as caught:
        normalize_pattern("\u200b", False)
    assert caught.value.construct == "empty match"


def test_class_ranges_are_limited_in_code_points():
    assert MAX_CLASS_RANGE_CODE_POINTS == 65_536
    normalize_pattern("[\u0000-\uffff]", True)
    with pytest.raises(RegexError, match="65536 code"):
        normalize_pattern("[\u0000-\uffff][\u0000-\u0001]", True)


@pytest.mark.slow  # builds automata up to their size limits
def test_nfa_and_dfa_limits_are_enforced_with_the_term_named(smollm2_vocab):
    pairs = "|".join(a + "x" for a in "abcdefghijklmnopqrstuvwyzABCDEFGHIJKLMNOPQRSTUVWYZ0123456789")
    big = f"(?:{pairs}){{1,64}}"
    assert len(big) < 256 and parse_regex(big)  # fine as syntax: the unrolled automaton is too large
    with pytest.raises(RegexError) as nfa:
        RegexAutomaton([(normalize_pattern(big, False), MatchMode.WORD)], False)
    assert nfa.value.construct == "automaton size" and str(MAX_REGEX_NFA_STATES) in nfa.value.reason
    with pytest.raises(WordListError) as named:
        compile_request_artefact(smollm2_vocab, [WordList("mine", (Term(big, MatchMode.WORD, regex=True),))])
    assert named.value.source == "mine" and repr("re:" + big) in str(named.value)
    blowup = WordList("mine", (Term("ok", MatchMode.WORD, regex=True), Term("a.{0,40}b", MatchMode.SUBSTRING, regex=True)))
    for compile_, limit in ((compile_request_artefact, MAX_REQUEST_REGEX_DFA_STATES), (compile_artefact, MAX_REGEX_DFA_STATES)):
        with pytest.raises(WordListError) as dfa:
            compile_(smollm2_vocab, [blowup])
        assert dfa.value.source == "mine" and "'re:a.{0,40}b'" in str(dfa.value)
        assert f"more than {limit} automaton states" in str(dfa.value)
    with pytest.raises(WordListError) as checked:  # what the service runs before storing a list
        check_regex_terms(WordList("mine", (Term("fine", MatchMode.WORD), *blowup.terms)))
    assert checked.value.line == 3 and checked.value.source == "<request>"


def test_terms_that_fit_alone_but_not_together_name_the_lists(smollm2_vocab):
    lists = [WordList(f"l{i}", (Term(f"{c}.{{0,9}}{c}", MatchMode.WORD, regex=True),)) for i, c in enumerate("abcdefgh")]
    for wordlist in lists:
        assert RegexAutomaton([(normalize_pattern(wordlist.terms[0].text, False), MatchMode.WORD)], False).num_nodes < 500
    with pytest.raises(WordListError, match="together") as caught:
        compile_request_artefact(smollm2_vocab, lists)
    assert caught.value.source == ", ".join(wl.name for wl in lists)
    with pytest.raises(WordListError, match="together") as checked:
        check_regex_terms(WordList("all", tuple(wl.terms[0] for wl in lists)), MAX_REQUEST_REGEX_DFA_STATES)
    assert checked.value.line is None


# --- the rewrite over normalised text -------------------------------------------------------


@pytest.mark.parametrize(("pattern", "case_sensitive", "rewritten"), [
    ("Fuck", False, "fuck"),
    ("Fuck", True, "Fuck"),
    ("[A-Z]x", False, "[a-z]x"),
    ("[A-Z]x", True, "[A-Z]x"),
    ("[^A-Z]x", False, "[^a-z]x"),
    ("[Ａ-Ｃ]x", True, "[A-C]x"),
    ("ß", False, "ss"),
    ("ß", True, "ß"),
    ("a  \t b", False, "a\\ b"),
    ("[\\w-]x", False, "[\\u002d\\w]x"),
    ("s(?:o|0){1,2}rry", False, "s(?:[0o]){1,2}rry"),  # Python merges one-character alternatives
    ("(?x) a b # comment", False, "ab"),
    ("a\\bb|\\Bc", False, "(?:a\\bb|\\Bc)"),
])
def test_literals_and_class_members_are_normalised_as_the_text_is(pattern, case_sensitive, rewritten):
    assert normalize_pattern(pattern, case_sensitive) == rewritten


def test_a_range_stands_for_its_members_that_normalise_to_one_character():
    rewritten = normalize_pattern("[À-ÿ]", False)
    assert re.fullmatch(rewritten, "é") and re.fullmatch(rewritten, "à")
    assert not re.fullmatch(rewritten, "ß")  # normalised text spells it "ss"; [À-ÿ] would have matched "ß"


def scan(terms, text):
    return [(m.term, text[m.start:m.end]) for m in TextMatcher([wordlist_from_terms(terms)]).scan(text)]


def test_case_insensitive_regex_matches_every_casing_and_width():
    assert scan(["re:s[o0]rry"], "SORRY, S0rry, ｓｏｒｒｙ, sorrow") == [
        ("re:s[o0]rry", "SORRY"), ("re:s[o0]rry", "S0rry"), ("re:s[o0]rry", "ｓｏｒｒｙ")]
    assert scan([Term("[A-Z]{2}\\d", MatchMode.WORD, case_sensitive=True, regex=True)], "AB1 ab1 Ａb1") == [
        ("re:[A-Z]{2}\\d", "AB1")]
    assert scan(["re:[A-Z]{2}\\d"], "AB1 ab1") == [("re:[A-Z]{2}\\d", "AB1"), ("re:[A-Z]{2}\\d", "ab1")]


def test_match_modes_and_word_boundaries():
    text = "classy ass, assassin, a-ss sass"
    assert scan([Term("a(?:ss){1,2}", MatchMode.WORD, regex=True)], text) == [("re:a(?:ss){1,2}", "ass")]
    assert [m for _, m in scan([Term("a(?:ss){1,2}", MatchMode.PREFIX, regex=True)], text)] == ["ass", "ass"]
    assert [m for _, m in scan([Term("s{1,2}\\b", MatchMode.SUBSTRING, regex=True)], "ass sass")] == ["ss", "ss"]
    assert [m for _, m in scan([Term("s\\B", MatchMode.SUBSTRING, regex=True)], "ass sass")] == ["s", "s", "s"]
    # word mode: the edge rule of plain terms (a boundary only where the match's edge is a word character)
    assert [m for _, m in scan([Term("[$]\\d{1,2}", MatchMode.WORD, regex=True)], "x$12 $1a")] == ["$12"]


def test_whitespace_and_zero_width_characters_follow_the_text_contract():
    assert [m for _, m in scan(["re:fuck\\s(?:you|u)"], "FUCK \n\t YOU; fuck\u200b u")] == ["FUCK \n\t YOU", "fuck\u200b u"]
    assert scan(["re:a  b"], "a b") == [("re:a  b", "a b")]


def test_one_report_per_end_from_the_earliest_start():
    assert scan([Term("a{1,3}b", MatchMode.SUBSTRING, regex=True)], "aaaab ab") == [
        ("re:a{1,3}b", "aaab"), ("re:a{1,3}b", "ab")]


def test_backtracking_patterns_scan_in_linear_time(monkeypatch):
    """Python's re takes ~55 s on this (catastrophic backtracking); the DFA reads each character once
    (counted: one DFA step per character, no clock; speed is bench/'s)."""
    matcher = TextMatcher([wordlist_from_terms([Term("(?:a{1,2}){1,25}b", MatchMode.SUBSTRING, regex=True)])])
    steps = []
    step = RegexAutomaton.step

    def counted(self, node, char):
        steps.append(char)
        return step(self, node, char)

    monkeypatch.setattr(RegexAutomaton, "step", counted)
    assert matcher.scan("a" * 20_000) == []
    assert len(steps) == 20_000


# --- the reference against a brute force -----------------------------------------------------

@settings(max_examples=300, deadline=None)
@given(pattern=patterns(), match=st.sampled_from(list(MatchMode)), case_sensitive=st.booleans(),
       text=st.text("abAé ß-1.\u200bxB", max_size=14))
def test_the_oracle_equals_a_brute_force(pattern, match, case_sensitive, text):
    try:
        normalized = normalize_pattern(pattern, case_sensitive)
    except RegexError:
        assume(False)
    norm = normalize(text, case_sensitive)
    assert ReferenceRegex(normalized, match).spans(norm) == brute_force(normalized, match, norm)


@settings(max_examples=300, deadline=None)
@given(pattern=patterns(), match=st.sampled_from(list(MatchMode)), case_sensitive=st.booleans(),
       text=st.text("abAé ß-1.\u200bxB傻\t", max_size=40))
def test_the_text_matcher_equals_python_re_over_normalised_text(pattern, match, case_sensitive, text):
    term = Term(pattern, match, case_sensitive, regex=True)
    try:
        matcher = TextMatcher([WordList("x", (term,))])
    except WordListError:
        assume(False)
    (spec,) = matcher.terms
    norm, offsets = normalize_with_offsets(text, case_sensitive)
    expected = {(spec.text, offsets[s], offsets[e - 1] + 1) for s, e in ReferenceRegex(spec.normalized, match).spans(norm)}
    assert {(m.term, m.start, m.end) for m in matcher.scan(text)} == expected


@settings(max_examples=500, deadline=None)
@given(pattern=st.text("ab.()[]{}^$*+?|\\-,0129dwsbBAZ=!<>:PNxé ", min_size=1, max_size=24))
def test_any_pattern_is_accepted_or_refused_with_a_word_list_error(pattern):
    """Whatever a request sends after re:, the answer is a list that compiles or a WordListError (a 400),
    never another exception."""
    try:
        wordlist = wordlist_from_terms(["re:" + pattern])
        check_regex_terms(wordlist, MAX_REQUEST_REGEX_DFA_STATES)
        TextMatcher([wordlist]).scan("ab ba a1 (b) é")
    except WordListError as exc:
        assert exc.reason


@pytest.mark.parametrize(("pattern", "tree"), [
    # The shapes of re._parser's tree (private API, regex_syntax.py says why it is still the parser) that
    # regex_syntax, regex_term, regex_nfa and regex_tokens read: a Python release that changes one fails here.
    ("a|bc", [("BRANCH", (None, [[("LITERAL", 97)], [("LITERAL", 98), ("LITERAL", 99)]]))]),
    ("x{1,2}?y", [("MIN_REPEAT", (1, 2, [("LITERAL", 120)])), ("LITERAL", 121)]),
    ("x{0,2}y", [("MAX_REPEAT", (0, 2, [("LITERAL", 120)])), ("LITERAL", 121)]),
    ("[^\\w-]z", [("IN", [("NEGATE", None), ("CATEGORY", "CATEGORY_WORD"), ("LITERAL", 45)]), ("LITERAL", 122)]),
    ("[a-c]\\Bq", [("IN", [("RANGE", (97, 99))]), ("AT", "AT_NON_BOUNDARY"), ("LITERAL", 113)]),
    ("(?P<g>d)\\b.", [("SUBPATTERN", (1, 0, 0, [("LITERAL", 100)])), ("AT", "AT_BOUNDARY"), ("ANY", None)]),
    ("[^a]", [("NOT_LITERAL", 97)]),
])
def test_the_stdlib_parse_tree_keeps_the_shapes_the_matching_layer_reads(pattern, tree):
    def named(node):  # opcodes are named int constants of re._constants: compare their names
        if isinstance(node, list) or type(node).__name__ == "SubPattern":  # a group's items: a SubPattern
            return [named(item) for item in node]
        if isinstance(node, tuple):
            return tuple(named(item) for item in node)
        return str(node) if type(node).__name__ == "_NamedIntConstant" else node

    assert named(parse_regex(pattern)) == tree
