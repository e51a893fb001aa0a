"""TextMatcher(shared=False): untrusted text reads private obfuscation automata, which it never grows past a
bound, and which leave the shared automata (the ones the decoder steps) untouched.

Before this, ``/v1/check`` and moderations scanned clients' text through the shared automata: random text grows
the lazily built DFA (~60,000 nodes per million random characters, ~1.2 KB each), and at its node limit every
reader, generations included, failed with ``RegexError``.
"""

from __future__ import annotations

import random

import pytest

from guardrail.matching.obfuscation.automaton import ObfuscationAutomaton
from guardrail.matching.textmatch import TextMatcher
from guardrail.wordlists.regex_syntax import RegexError
from guardrail.wordlists.wordlist import wordlist_from_terms

# Terms of their own (not `en`): the shared automata of these terms are this module's alone.
TERMS = ["fuckwit", "shitstain", "bitchface", "twatwaffle"]
ALPHABET = "abcdefghiknorstuwf*@$!01345 .-_"


def random_text(seed: int, length: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(ALPHABET) for _ in range(length))


def automata(matcher: TextMatcher) -> list[ObfuscationAutomaton]:
    return [automaton for automaton, _ in matcher._views]


@pytest.fixture
def lists():
    return [wordlist_from_terms(TERMS, name="insults")]


def test_private_automata_find_what_the_shared_ones_find(lists):
    shared, private = TextMatcher(lists), TextMatcher(lists, shared=False)
    text = "you f*ckwit, a sh!tstain and a b i t c h f a c e. " + random_text(1, 3000) + " twatwaff1e"
    found = private.scan(text)
    assert found == shared.scan(text)
    assert {m.term for m in found} >= {"fuckwit", "shitstain", "bitchface", "twatwaffle"}


def test_private_scans_leave_the_shared_automata_as_they_were(lists):
    shared = automata(TextMatcher(lists))
    before = [a.num_nodes for a in shared]
    private = TextMatcher(lists, shared=False)
    for seed in range(3):
        private.scan(random_text(seed, 5000))
    assert [a.num_nodes for a in shared] == before
    assert all(p is not s for p, s in zip(automata(private), shared))
    assert sum(a.num_nodes for a in automata(private)) > sum(before)


def test_private_automata_start_afresh_past_the_node_limit(lists):
    matcher = TextMatcher(lists, shared=False, node_limit=200)
    matcher.scan(random_text(7, 20_000))
    grown = automata(matcher)
    assert max(a.num_nodes for a in grown) > 200  # the scan itself may pass the limit
    reference = TextMatcher(lists)
    text = "a f*ckwit " + random_text(8, 500)
    assert matcher.scan(text) == reference.scan(text)
    fresh = automata(matcher)
    assert all(new is not old for new, old in zip(fresh, grown))
    assert max(a.num_nodes for a in fresh) < max(a.num_nodes for a in grown)


def test_a_scan_that_reaches_the_automaton_limit_is_run_again_on_fresh_automata(lists):
    matcher = TextMatcher(lists, shared=False, node_limit=10**9)  # no early reset: the limit itself is reached
    for automaton in automata(matcher):
        automaton._max_states = 400  # the node limit, lowered for this matcher's copies (private_copy keeps it)
    reference = TextMatcher(lists)
    replaced = 0
    for seed in range(40):  # each text alone fits in 400 nodes; together they do not
        held = automata(matcher)
        text = "f*ckwit " + random_text(seed, 2000) + " sh1tstain"
        assert matcher.scan(text) == reference.scan(text)
        replaced += any(new is not old for new, old in zip(automata(matcher), held))
    assert replaced >= 1


def test_a_text_that_alone_needs_more_nodes_than_the_limit_raises(lists):
    matcher = TextMatcher(lists, shared=False)
    for automaton in automata(matcher):
        automaton._max_states = 50
    with pytest.raises(RegexError):
        matcher.scan(random_text(5, 20_000))
