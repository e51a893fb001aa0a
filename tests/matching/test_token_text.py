"""The token-text index agrees with the automaton's own normalisation and with plain string search, on
SmolLM2's real vocab: it is where request terms and masks find their candidates, so a token it missed
would be a token the guard never checks."""

from __future__ import annotations

import numpy as np
import pytest

from guardrail.matching.normalize import is_word_char, normalize
from guardrail.matching.token_text import TokenTextIndex, token_difference, token_set, token_text


@pytest.fixture(scope="module")
def index(smollm2_vocab):
    return TokenTextIndex.for_vocab(smollm2_vocab)


@pytest.mark.parametrize("case_sensitive", [False, True])
def test_texts_are_the_per_character_normalisation(smollm2_vocab, index, case_sensitive):
    """The index normalises all texts in one ``str.translate``; the automaton folds character by character."""
    texts = index._modes[case_sensitive].texts
    for token_id, data in enumerate(smollm2_vocab.token_bytes):
        assert texts[token_id] == normalize(token_text(data), case_sensitive), token_id


@pytest.mark.parametrize("needle", ["a", "ing", " you", "The", "é", "的", "ab", "sorry", "\n", "zzqx"])
@pytest.mark.parametrize("case_sensitive", [False, True])
def test_substring_and_prefix_search_equal_a_scan(index, needle, case_sensitive):
    texts = index._modes[case_sensitive].texts
    want = needle if case_sensitive else needle.casefold()
    want = " " if want == "\n" else want
    contained = [i for i, t in enumerate(texts) if want in t]
    assert index.containing(want, case_sensitive).tolist() == contained
    started = [i for i, t in enumerate(texts) if t.startswith(want)]
    assert sorted(index.starting_with(want, case_sensitive).tolist()) == started
    assert len(contained) > 0 or want == "zzqx"


def test_nonword_first_and_continuation_first_classes(smollm2_vocab, index):
    texts = index._modes[False].texts
    assert index.nonword_first(False).tolist() == [i for i, t in enumerate(texts) if t and not is_word_char(t[0])]
    assert index.continuation_first.tolist() == [i for i, b in enumerate(smollm2_vocab.token_bytes)
                                                 if b and b[0] & 0xC0 == 0x80]


def test_token_set_operations():
    a = np.array([5, 1, 3, 3], dtype=np.int64)
    b = np.array([2, 3], dtype=np.int64)
    assert token_set(a, b).tolist() == [1, 2, 3, 5]
    assert token_set().tolist() == []
    assert token_difference(np.array([1, 2, 3, 5]), np.array([2, 5])).tolist() == [1, 3]
    assert token_difference(np.array([1, 2]), np.array([], dtype=np.int64)).tolist() == [1, 2]
