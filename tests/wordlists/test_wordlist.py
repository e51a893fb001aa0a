"""The word-list format, its validation, the bundled LDNOOBW lists and the content digest."""

from __future__ import annotations

import pytest
from helpers.paths import ROOT, load_data
from hypothesis import given, settings
from hypothesis import strategies as st

from guardrail.wordlists.wordlist import (
    MAX_TERM_CHARS,
    MAX_TERMS,
    MatchMode,
    Term,
    WordList,
    WordListError,
    bundled_names,
    bundled_wordlist,
    default_match_mode,
    format_wordlist,
    load_wordlist,
    parse_wordlist,
    wordlist_digest,
    wordlist_from_terms,
)

LDNOOBW_CODES = [
    "ar", "cs", "da", "de", "en", "eo", "es", "fa", "fi", "fil", "fr", "fr-CA-u-sd-caqc", "hi",
    "hu", "it", "ja", "kab", "ko", "nl", "no", "pl", "pt", "ru", "sv", "th", "tlh", "tr", "zh",
]  # fmt: skip


def _term(wordlist: WordList, text: str) -> Term:
    matches = [t for t in wordlist.terms if t.text == text]
    assert len(matches) == 1, f"{text!r} occurs {len(matches)} times in {wordlist.name}"
    return matches[0]


def _texts(wordlist: WordList) -> set[str]:
    return {t.text for t in wordlist.terms}


# --- bundled lists -------------------------------------------------------------------------


def test_all_28_ldnoobw_lists_are_bundled_and_parse():
    assert bundled_names() == sorted(LDNOOBW_CODES)
    for name in bundled_names():
        wordlist = bundled_wordlist(name)
        assert wordlist.name == name
        assert wordlist.terms, name


def test_bundled_term_counts_are_close_to_upstream():
    # Upstream counts recorded from naughty-words 1.2.0 (the file's _doc says how).
    upstream_counts = load_data("ldnoobw_upstream_counts.json")["distinct_terms"]
    assert sorted(upstream_counts) == bundled_names()
    for name in bundled_names():
        count = len(bundled_wordlist(name).terms)
        upstream = upstream_counts[name]
        # Only a handful of terms per list are removed (see wordlists/NOTICE).
        assert upstream - 20 <= count <= upstream, (name, count, upstream)
    assert len(bundled_wordlist("en").terms) == 402


def test_bundled_lists_ship_licence_and_attribution():
    directory = ROOT / "wordlists"
    notice = (directory / "NOTICE").read_text("utf-8")
    assert "Shutterstock" in notice and "creativecommons.org/licenses/by/4.0" in notice
    assert "Attribution 4.0" in (directory / "LICENSE").read_text("utf-8")
    for edited in ("en", "fil", "hi", "ja", "kab", "ko", "th", "zh"):
        assert f"\n{edited} (" in notice, f"NOTICE lists no edits for {edited}"


def test_ass_is_a_whole_word_term_in_the_english_list():
    en = bundled_wordlist("en")
    assert _term(en, "ass").match is MatchMode.WORD
    assert _term(en, "tit").match is MatchMode.WORD
    assert _term(en, "fuck").match is MatchMode.PREFIX


def test_russian_and_arabic_short_terms_are_whole_word():
    assert _term(bundled_wordlist("ru"), "мент").match is MatchMode.WORD
    assert _term(bundled_wordlist("ru"), "манда").match is MatchMode.WORD
    assert _term(bundled_wordlist("ar"), "مص").match is MatchMode.WORD


def test_cjk_terms_are_substring_and_single_character_traps_are_removed():
    zh = bundled_wordlist("zh")
    assert "性" not in _texts(zh) and "奶" not in _texts(zh)
    assert _term(zh, "性交").match is MatchMode.SUBSTRING
    assert _term(zh, "奶子").match is MatchMode.SUBSTRING
    assert _term(zh, "13.").match is MatchMode.WORD
    # Every single-character zh term that remains is only ever vulgar, or has allow-terms.
    assert {t.text for t in zh.terms if len(t.text) == 1} >= {"屄", "屌", "肏", "鳩"}
    assert "斑鳩" in zh.allow
    ja = bundled_wordlist("ja")
    assert "卍" not in _texts(ja)
    assert _term(ja, "sm").match is MatchMode.WORD  # Latin inside the ja list: not in "small"


def test_zh_duplicate_is_collapsed():
    assert [t.text for t in bundled_wordlist("zh").terms].count("仆街") == 1


def test_korean_is_word_mode_with_prefix_stems():
    ko = bundled_wordlist("ko")
    assert _term(ko, "씹").match is MatchMode.WORD
    assert _term(ko, "씨발").match is MatchMode.PREFIX
    assert "보지" not in _texts(ko)


def test_thai_terms_are_substring_with_allow_terms():
    th = bundled_wordlist("th")
    assert all(t.match is MatchMode.SUBSTRING for t in th.terms)
    assert "กู้" in th.allow


def test_unknown_bundled_list_is_an_error():
    with pytest.raises(WordListError, match="unknown bundled word list"):
        bundled_wordlist("xx")
    with pytest.raises(WordListError):
        bundled_wordlist("../pyproject")


def test_bundled_lists_round_trip_through_the_formatter():
    for name in bundled_names():
        wordlist = bundled_wordlist(name)
        assert parse_wordlist(format_wordlist(wordlist), name) == wordlist


# --- default mode --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "mode"),
    [
        ("ass", MatchMode.WORD),
        ("kiss my ass", MatchMode.WORD),
        ("мент", MatchMode.WORD),
        ("씨발", MatchMode.WORD),  # Korean is written with spaces
        ("性", MatchMode.SUBSTRING),
        ("𨳒", MatchMode.SUBSTRING),  # outside the BMP
        ("セックス", MatchMode.SUBSTRING),
        ("ひらがな", MatchMode.SUBSTRING),
        ("ควย", MatchMode.SUBSTRING),
        ("卖B", MatchMode.SUBSTRING),
        ("ສັດ", MatchMode.SUBSTRING),  # Lao
        ("13.", MatchMode.WORD),
    ],
)
def test_default_match_mode_is_substring_only_for_scripts_without_spaces(text, mode):
    assert default_match_mode(text) is mode


# --- format --------------------------------------------------------------------------------


def test_directives_and_per_term_options_parse():
    text = """\
# house rules
idiot | match=prefix
NASA | case=sensitive, match=word
@match substring
cunt
@case sensitive
Foo
bar | case=insensitive, match=word
  spaced term  \t
!scunthorpe
\\#hashtag
\\!bang
性交
"""
    wordlist = parse_wordlist(text, name="house")
    assert wordlist == WordList(
        name="house",
        terms=(
            Term("idiot", MatchMode.PREFIX),
            Term("NASA", MatchMode.WORD, case_sensitive=True),
            Term("cunt", MatchMode.SUBSTRING),
            Term("Foo", MatchMode.SUBSTRING, case_sensitive=True),
            Term("bar", MatchMode.WORD),
            Term("spaced term", MatchMode.SUBSTRING, case_sensitive=True),
            Term("#hashtag", MatchMode.SUBSTRING, case_sensitive=True),
            Term("!bang", MatchMode.SUBSTRING, case_sensitive=True),
            Term("性交", MatchMode.SUBSTRING, case_sensitive=True),
        ),
        allow=("scunthorpe",),
    )


def test_pipes_inside_terms():
    wordlist = parse_wordlist("a|b\nthis | that |\nx | y | match=prefix\n", name="p")
    assert wordlist.terms == (
        Term("a|b", MatchMode.WORD),
        Term("this | that", MatchMode.WORD),
        Term("x | y", MatchMode.PREFIX),
    )


def test_duplicates_are_collapsed_but_different_options_are_kept():
    wordlist = parse_wordlist("ass\n ass \nass\nass | match=prefix\n!x\n!x\n", name="d")
    assert wordlist.terms == (Term("ass", MatchMode.WORD), Term("ass", MatchMode.PREFIX))
    assert wordlist.allow == ("x",)


def test_crlf_and_bom_are_accepted(tmp_path):
    path = tmp_path / "win.txt"
    path.write_bytes("\ufeffone\r\n# c\r\ntwo | match=prefix\r\n".encode())
    assert load_wordlist(path) == WordList(
        "win", (Term("one", MatchMode.WORD), Term("two", MatchMode.PREFIX))
    )


# --- validation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "line", "message"),
    [
        ("ok\n| match=word\n", 2, "empty term"),
        ("ok\n\n  ...  \n", 3, "no letter or digit"),
        ("ok\n🖕\n", 2, "no letter or digit"),
        ("x" * (MAX_TERM_CHARS + 1) + "\n", 1, "257 characters"),
        ("ok\nfoo | mode=word\n", 2, "unknown option 'mode'"),
        ("ok\nfoo | match=fuzzy\n", 2, "invalid value 'fuzzy' for option 'match'"),
        ("foo | case=upper\n", 1, "invalid value 'upper'"),
        ("foo | match=word, match=prefix\n", 1, "given twice"),
        ("foo | prefix\n", 1, "name=value"),
        ("ok\n# fine\n@include other.txt\n", 3, "unknown directive @include"),
        ("@match\n", 1, "invalid value ''"),
        ("!\n", 1, "empty allow-term"),
        ("!--\n", 1, "allow-term '--' has no letter or digit"),
    ],
)
def test_validation_error_names_file_and_line(tmp_path, body, line, message):
    path = tmp_path / "bad.txt"
    path.write_text(body, encoding="utf-8")
    with pytest.raises(WordListError) as info:
        load_wordlist(path)
    assert info.value.source == str(path)
    assert info.value.line == line
    assert str(info.value).startswith(f"{path}:{line}: ")
    assert message in str(info.value)


def test_term_of_exactly_the_limit_is_accepted():
    assert parse_wordlist("x" * MAX_TERM_CHARS, name="l").terms[0].text == "x" * MAX_TERM_CHARS


def test_invalid_utf8_reports_the_line_of_the_bad_bytes(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes(b"good\n# comment\nstill good\n" + "café\n".encode("latin-1"))
    with pytest.raises(WordListError, match="invalid UTF-8") as info:
        load_wordlist(path)
    assert (info.value.source, info.value.line) == (str(path), 4)
    assert f"{path}:4:" in str(info.value)


def test_too_many_terms_is_an_error():
    text = "\n".join(f"t{i}" for i in range(MAX_TERMS + 1))
    with pytest.raises(WordListError, match="more than 100000 terms") as info:
        parse_wordlist(text, name="big", source="big.txt")
    assert info.value.line == MAX_TERMS + 1
    at_limit = parse_wordlist("\n".join(f"t{i}" for i in range(MAX_TERMS)), name="ok")
    assert len(at_limit.terms) == MAX_TERMS


def test_wordlist_from_terms_validates_with_the_term_index():
    with pytest.raises(WordListError) as info:
        wordlist_from_terms(["fine", "  ", "also fine"])
    assert (info.value.source, info.value.line) == ("<request>", 2)
    assert str(info.value).startswith("<request>:2: empty term")
    with pytest.raises(WordListError, match=r"<request>:1: .*has no letter or digit"):
        wordlist_from_terms(["?!"])
    with pytest.raises(WordListError, match=r"<request>:1: .*U\+000A"):
        wordlist_from_terms(["two\nlines"])
    with pytest.raises(WordListError, match=r"<request>:2: .*257 characters"):
        wordlist_from_terms(["ok", "y" * 257])


def test_wordlist_from_terms_accepts_strings_and_terms():
    wordlist = wordlist_from_terms(
        [" idiot ", Term("NASA", MatchMode.WORD, True), "性交", "idiot"], name="req"
    )
    assert wordlist == WordList(
        "req",
        (
            Term("idiot", MatchMode.WORD),
            Term("NASA", MatchMode.WORD, case_sensitive=True),
            Term("性交", MatchMode.SUBSTRING),
        ),
    )


# --- digest --------------------------------------------------------------------------------


def test_digest_is_stable_under_reordering():
    a = parse_wordlist("one\ntwo | match=prefix\n!x\n!y\n", name="a")
    b = parse_wordlist("!y\ntwo | match=prefix\n!x\none\n", name="a")
    c = parse_wordlist("zzz\n", name="c")
    assert a != b  # order differs ...
    assert wordlist_digest([a, c]) == wordlist_digest([c, b])  # ... the content does not
    assert len(wordlist_digest([a])) == 64


def test_digest_changes_with_any_term_option_allow_term_or_name():
    base = parse_wordlist("one\ntwo\n!x\n", name="a")
    variants = [
        parse_wordlist("one\ntwo | match=prefix\n!x\n", name="a"),
        parse_wordlist("one\ntwo | case=sensitive\n!x\n", name="a"),
        parse_wordlist("one\ntwo\n!y\n", name="a"),
        parse_wordlist("one\nthree\n!x\n", name="a"),
        parse_wordlist("one\ntwo\n", name="a"),
        parse_wordlist("one\ntwo\n!x\n", name="b"),
    ]
    digests = {wordlist_digest([base])} | {wordlist_digest([v]) for v in variants}
    assert len(digests) == len(variants) + 1


# --- serialiser round trip ------------------------------------------------------------------

_term_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp"))
    | st.sampled_from("#@!\\| ,=\t"),
    min_size=1,
    max_size=20,
).map(str.strip).filter(lambda s: any(c.isalnum() for c in s))

_regex_text = st.sampled_from(["s[o0]rry", "a|b", "x | y", "#[a-z]{2}", "\\bfoo\\b", "re:x", "(?x) a b", "傻."])
_terms = st.one_of(
    st.builds(Term, _term_text, st.sampled_from(list(MatchMode)), st.booleans()),
    # literal texts that read like a regex term or its escape
    st.builds(Term, st.sampled_from(["re:x", "\\re:y", "\\\\re:z", "re:", "re:#"]).map(lambda t: t + "1"),
              st.sampled_from(list(MatchMode)), st.booleans()),
    st.builds(Term, _regex_text, st.sampled_from(list(MatchMode)), st.booleans(), st.just(True)),
)


@settings(max_examples=300, deadline=None)
@given(terms=st.lists(_terms, max_size=12), allow=st.lists(_term_text, max_size=4))
def test_format_then_parse_gives_the_same_list(terms, allow):
    wordlist = WordList(
        "prop", tuple(dict.fromkeys(terms)), tuple(dict.fromkeys(allow))
    )
    assert parse_wordlist(format_wordlist(wordlist), "prop") == wordlist
