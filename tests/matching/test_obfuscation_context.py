"""Forms in context (issue 28): every form the default level catches alone is caught whatever surrounds it —
words and one-letter words on either side, punctuation, quotes, brackets, line starts, markup — on text
(``TextMatcher``) and token by token on a real tokenizer, canonical and split (docs/matching.md, "Obfuscation").

The forms are those of the project's set (``tests/data/obfuscation_cases.json``), cut out of their sentences at
the span the text matcher reports; the contexts are drawn by Hypothesis (derandomised: a failure reproduces).
"""

from __future__ import annotations

import pytest
from helpers.paths import load_data
from helpers.tokens import encode, encode_split, terms_by_tokens
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from guardrail.matching.compiler import compile_artefact
from guardrail.matching.obfuscation import DEFAULT_OBFUSCATION
from guardrail.matching.textmatch import TextMatcher
from guardrail.wordlists.wordlist import bundled_wordlist, with_obfuscation

EN = with_obfuscation([bundled_wordlist("en")], DEFAULT_OBFUSCATION)
MATCHER = TextMatcher(EN)


def _forms() -> list[tuple[str, str]]:
    """(term, form as written) for every case of the set the default level catches in its sentence."""
    found = []
    for case in load_data("obfuscation_cases.json")["cases"]:
        spans = [case["text"][m.start:m.end] for m in MATCHER.scan(case["text"]) if m.term == case["term"]]
        if spans:
            found.append((case["term"], spans[0]))
    return sorted(set(found))


FORMS = _forms()
#: Words that stand next to a form in chat text: one-letter words first (the contexts that hid forms).
WORDS = ["a", "I", "u", "x", "e", "o", "y", "2", "you're", "what", "the", "is", "it", "and", "so", "not", "my",
         "up", "off", "you", "this", "lol", "ok"]
#: Markup and quotes around a form (CommonMark emphasis and code, HTML, quotation marks, brackets).
WRAPS = [("", ""), ("", ""), ("", ""), ("*", "*"), ("**", "**"), ("_", "_"), ("__", "__"), ("~~", "~~"), ("`", "`"),
         ("<b>", "</b>"), ("<i>", "</i>"), ("\"", "\""), ("'", "'"), ("(", ")"), ("[", "]"), ("{", "}"),
         ("\u201c", "\u201d"), ("\u00ab", "\u00bb"), ("\n", ""), ("", "\n")]
#: Punctuation right after a form (and its wrap).
PUNCTUATION = ["", "", ".", ",", "!", "?", "...", ";", ":", "!!", "?!"]
#: Between the context's words and the form.
GAPS = [" ", " ", "  ", "\n", " - ", ", "]


def _sentence_words() -> st.SearchStrategy[list[str]]:
    """Up to three words, never two one-letter words in a row (a spaced form beside ``a a`` is a longer
    spaced run: no reader can tell where the form ends)."""
    return st.lists(st.sampled_from(WORDS), max_size=3).filter(
        lambda words: not any(len(a) == 1 and len(b) == 1 for a, b in zip(words, words[1:])))


@st.composite
def contexts(draw) -> tuple[str, str]:
    left = draw(_sentence_words())
    right = draw(_sentence_words())
    opening, closing = draw(st.sampled_from(WRAPS))
    before = (" ".join(left) + draw(st.sampled_from(GAPS)) if left else "") + opening
    after = closing + draw(st.sampled_from(PUNCTUATION)) + (draw(st.sampled_from(GAPS)) + " ".join(right) if right else "")
    return before, after


def test_the_forms_cover_every_obfuscation_the_default_level_claims():
    assert len(FORMS) >= 180
    assert {term for term, _ in FORMS} >= {"fuck", "shit", "bitch", "asshole", "ass"}


@settings(max_examples=600, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(form=st.sampled_from(FORMS), context=contexts())
def test_a_form_caught_alone_is_caught_in_any_context_on_text(form, context):
    term, written = form
    text = context[0] + written + context[1]
    assert term in {m.term for m in MATCHER.scan(text)}, repr(text)


@pytest.mark.parametrize("text", ["you're a f*ck.", "what a f-u-c-k!", "I f*ck up", "u f*ck", "it is a b!tch",
                                  "A f u c k and a f u c k", "x f u c k", "e f*ck", "(f**k)", "_f*ck_", "*f*ck*"])
def test_the_issues_examples_are_caught(text):
    assert MATCHER.scan(text), text


@pytest.fixture(scope="module")
def en_artefact(smollm2_vocab):
    return compile_artefact(smollm2_vocab, EN)


@settings(max_examples=150, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(form=st.sampled_from(FORMS), context=contexts(), cut=st.integers(min_value=0, max_value=10_000))
def test_tokens_find_what_the_text_finds_in_any_context(smollm2_tokenizer, en_artefact, form, context, cut):
    """The decoder steps the same automata: canonical and split tokenizations report the text's terms."""
    term, written = form
    text = context[0] + written + context[1]
    want = {m.term for m in MATCHER.scan(text)}
    assert term in want
    for ids in (encode(smollm2_tokenizer, text), encode_split(smollm2_tokenizer, text, [cut % (len(text) + 1)])):
        assert smollm2_tokenizer.decode(ids) == text
        assert terms_by_tokens(en_artefact, ids) == want, repr(text)
