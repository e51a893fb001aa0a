"""bench/joined_words.py: the prototype joined-word rule reads a term glued to a common word, spares real words
(the lexicon's compounds, names) and words that only look joined. No held-out text is printed."""

import importlib.util
import sys

import pytest
from helpers.paths import ROOT


def _load_bench_module(name: str):
    """``bench/<name>.py`` by its path, registered under its plain name (the bench scripts import each other
    that way); ``bench/`` never goes on ``sys.path``, where its ``service.py`` would hide the ``service``
    package."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def rule():
    for name in ("human_text", "obfuscation"):
        _load_bench_module(name)
    return _load_bench_module("joined_words").Rule("en")


@pytest.mark.parametrize(("word", "expected"), [
    ("whorebehaviour", ("whore", "tw")),  # term + common word (HateCheck's deleted space)
    ("Fagbehaviour", ("fag", "tw")),  # case-folded
    ("manyfaggots", ("faggot", "wt")),  # a prefix term takes the rest of the word after it
    ("stupidwhorebehaviour", ("whore", "wtw")),
])
def test_a_term_joined_to_a_common_word_is_read(rule, word, expected):
    assert rule.joined_term(word) == expected


@pytest.mark.parametrize("word", [
    "cocktail",  # a real word (the lexicon): cock + tail
    "scunthorpe",  # a place name: "s" and "horpe" are not common words
    "assassin",  # ass + assin: not a common word
    "whore",  # the term itself is the matcher's, not this rule's
    "behaviour",  # no term in it
    "whore2behaviour",  # a digit: not a word of letters
    "whorebehaviourx",  # the rest is not a common word
])
def test_real_words_and_other_shapes_are_spared(rule, word):
    assert rule.joined_term(word) is None


def test_the_rule_reads_words_in_text(rule):
    assert rule.flags("Typical whorebehaviour.")
    assert not rule.flags("A cocktail in Scunthorpe.")
