"""Combining sequences token by token (issue 28): a halfwidth katakana and its voiced mark compose across a
token boundary as in the text matcher, the katakana is held (not released) until the next character shows
whether it composes, and Arabic and Hebrew vowel marks never break a word (docs/matching.md)."""

from __future__ import annotations

from helpers.tokens import encode, encode_split, terms_by_tokens

from guardrail.matching.compiler import compile_artefact
from guardrail.matching.normalize import normalize
from guardrail.matching.obfuscation import OFF  # the artefacts here compile the lists as they are
from guardrail.matching.textmatch import TextMatcher
from guardrail.matching.token_matcher import TokenMatcher
from guardrail.wordlists.wordlist import bundled_wordlist, wordlist_from_terms


def test_halfwidth_voiced_kana_compose_across_tokens(smollm2_tokenizer, smollm2_vocab):
    lists = [bundled_wordlist("ja")]
    artefact = compile_artefact(smollm2_vocab, lists)
    text = "ね ｵｯﾊﾟｲ だ"
    assert [m.term for m in TextMatcher(lists, obfuscation=OFF).scan(text)] == ["オッパイ"]
    cut = text.index("\uff9f")  # between ﾊ and its voiced mark
    for ids in (encode(smollm2_tokenizer, text), encode_split(smollm2_tokenizer, text, [cut])):
        assert terms_by_tokens(artefact, ids) == {"オッパイ"}
    # Without the mark the katakana reads as itself: オッハイ is not the term.
    assert terms_by_tokens(artefact, encode(smollm2_tokenizer, "ｵｯﾊｲ")) == set()


def test_a_halfwidth_katakana_is_held_until_the_next_character(smollm2_tokenizer, smollm2_vocab):
    artefact = compile_artefact(smollm2_vocab, [wordlist_from_terms(["zzz"])])
    ids = encode_split(smollm2_tokenizer, "ok ﾊﾟ", [4])  # "ok ﾊ" | "ﾟ"
    matcher = TokenMatcher(artefact)
    released = []
    for token in ids:
        assert matcher.push(token) is None
        released.append(b"".join(smollm2_vocab.token_bytes[t] for t in matcher.tokens[:matcher.releasable()]))
    held = [r.decode("utf-8", "replace") for r in released]
    assert all("ﾊ" not in r for r in held[:-1])  # never released before the mark came


def test_vowel_marks_are_dropped_so_a_word_is_not_broken(smollm2_tokenizer, smollm2_vocab):
    assert normalize("سَكس") == "سكس" and normalize("שָׁלוֹם") == "שלום"
    artefact = compile_artefact(smollm2_vocab, [bundled_wordlist("ar")])
    for text in ("هذا سَكس", "هذا سكس"):
        assert terms_by_tokens(artefact, encode(smollm2_tokenizer, text)) == {"سكس"}, text
