"""The vectorised root sweep of a plain stream reads every token exactly as ``Automaton.feed`` does from the text
start: node, symbols, flags and hit, for texts made to hit its corner cases and for a real vocab."""

from __future__ import annotations

import pytest

from guardrail.matching.artefact_table import root_texts
from guardrail.matching.automaton import Automaton, symbol_pattern
from guardrail.matching.root_sweep import sweep_automaton
from guardrail.wordlists.wordlist import MatchMode

TERMS = [("ass", MatchMode.WORD), ("fuck", MatchMode.PREFIX), ("奶", MatchMode.SUBSTRING),
         ("shit head", MatchMode.WORD), ("a-hole", MatchMode.WORD), ("fi", MatchMode.SUBSTRING)]
ALLOWS = ["牛奶", "fin"]

#: Ligatures (one character to several), invisible characters (to none), whitespace runs and kinds, case,
#: non-word characters at either end, U+FFFD, the empty text, a term split by a zero-width space.
CORNER_TEXTS = ["", " ", "  ", " \t\n ", "ass", " ass", "ASS ", "class", "assy", "ﬁ", "ﬁn", "Ｆｕｃｋ", "fuck",
                "fuckers", "牛奶", "奶", "奶牛", "a-hole", "a‐hole", "shit  head", "shit\u00a0head", "as\u200bs",
                "\u200b", "\ufffd", "-ass-", "ß", "ǅ", "x" * 40, "ass " * 12, "\u0301a"]


def automaton(case_sensitive: bool) -> Automaton:
    patterns = [symbol_pattern(term, match) for term, match in TERMS]
    allowable = [match is MatchMode.SUBSTRING for _, match in TERMS]
    return Automaton(patterns, allowable, [symbol_pattern(a, MatchMode.SUBSTRING) for a in ALLOWS], case_sensitive)


def fed(stream: Automaton, texts: list[str]) -> list[tuple[int, int, int, bool]]:
    out, start = [], stream.fresh(False)
    for text in texts:
        hits: list[tuple[int, int]] = []
        state, count = stream.feed(start, text, hits)
        flags = state.prev_word | (state.prev_space << 1) | ((not hits and not state.pending) << 2)
        out.append((state.node, count, flags, bool(hits)))
    return out


def swept(stream: Automaton, texts: list[str]) -> list[tuple[int, int, int, bool]]:
    read = sweep_automaton(stream, texts)
    return [(int(n), int(s), int(f), bool(h)) for n, s, f, h in zip(read.node, read.symbols, read.flags, read.hit)]


@pytest.mark.parametrize("case_sensitive", [False, True])
def test_sweep_reads_corner_texts_as_feed_does(case_sensitive):
    stream = automaton(case_sensitive)
    assert swept(stream, CORNER_TEXTS) == fed(stream, CORNER_TEXTS)


def test_sweep_of_no_texts_is_empty():
    assert swept(automaton(False), []) == []


@pytest.mark.parametrize("case_sensitive", [False, True])
def test_sweep_reads_every_smollm2_token_as_feed_does(smollm2_vocab, case_sensitive):
    texts, _ = root_texts(smollm2_vocab.token_bytes)
    stream = automaton(case_sensitive)
    assert swept(stream, texts) == fed(stream, texts)
