"""Regex terms in the decoder (SmolLM2, the leak suite's prompts): the model says a word a regex term matches;
guarded, the first rollback goes to the token where that match began in the unguarded answer, and neither the
answer nor any streamed prefix holds a match — checked with Python's ``re`` (the oracle) and the text
matcher — greedy and sampled."""

from __future__ import annotations

import pytest
from helpers.paths import load_data
from helpers.regex_oracle import oracle_matches

from guardrail.engines.transformers.decoder import StreamingDecoder, generation_eos_ids
from guardrail.guard.events import Finish, Rollback, TextDelta
from guardrail.matching.compiler import compile_artefact
from guardrail.matching.normalize import normalize_with_offsets
from guardrail.matching.obfuscation import OFF  # the artefacts here compile the lists as they are
from guardrail.matching.term_spec import flatten
from guardrail.matching.textmatch import TextMatcher
from guardrail.matching.vocab import TokenVocab
from guardrail.params import SamplingParams
from guardrail.prompts import prompt_ids
from guardrail.wordlists.wordlist import wordlist_from_terms

pytestmark = pytest.mark.slow

LEAKS = {case["term"]: case for case in load_data("leak_prompts.json")}
#: Per leak-suite target, a regex term that matches it and its look-alikes.
REGEXES = {
    "sorry": "re:s[o0]rr(?:y|ies)",
    "Thank you": "re:th[a4]nks?\\s(?:you|u)",
    "blue": "re:bl(?:ue|oo)",
    "HELLO": "re:h[e3]l{1,2}[o0]",
    "January": "re:jan(?:uary|\\.)?",
    "oxygen": "re:[o0]xyg[e3]n",
}


@pytest.fixture(scope="module")
def decoder(smollm2_model, smollm2_tokenizer):
    vocab = TokenVocab.from_tokenizer(smollm2_tokenizer, eos_ids=generation_eos_ids(smollm2_model))
    return StreamingDecoder(smollm2_model, smollm2_tokenizer, vocab)


def first_match_token(vocab, ids, terms, text) -> int:
    """The completion token holding the first byte of the earliest-ending match's earliest start (oracle)."""
    found = sorted(oracle_matches(terms, text), key=lambda m: (m[2], m[1]))
    assert found, text
    _, start, _ = found[0]
    char = normalize_with_offsets(text)[1][start]  # the regexes here are case-insensitive
    byte = len(text[:char].encode())
    position = 0
    for index, token in enumerate(ids):
        if position + len(vocab.token_bytes[token]) > byte:
            return index
        position += len(vocab.token_bytes[token])
    raise AssertionError("match beyond the text")


@pytest.mark.parametrize("target", list(REGEXES))
def test_rollback_lands_where_the_regex_match_began_and_no_prefix_matches(decoder, smollm2_tokenizer, target):
    case, regex = LEAKS[target], REGEXES[target]
    lists = [wordlist_from_terms([regex], name="rx")]
    terms, _ = flatten(lists)
    artefact, matcher = compile_artefact(decoder.vocab, lists), TextMatcher(lists, obfuscation=OFF)
    ids = prompt_ids(smollm2_tokenizer, messages=[{"role": "user", "content": case["prompt"]}])
    budget = case["tokens_to_term"] + 6
    unguarded = list(decoder.stream(ids, None, SamplingParams(temperature=0, max_tokens=budget)))[-1]
    assert oracle_matches(terms, unguarded.text), unguarded.text  # the model does say it
    expected = first_match_token(decoder.vocab, unguarded.token_ids, terms, unguarded.text)
    for seed in (None, 0, 1):
        params = SamplingParams(temperature=0 if seed is None else 1.0, seed=seed, max_tokens=budget)
        events = list(decoder.stream(ids, artefact, params))
        released = ""
        for event in events[:-1]:
            assert not isinstance(event, Finish)
            if isinstance(event, TextDelta):
                released += event.text
                assert not oracle_matches(terms, released) and matcher.scan(released) == [], released
        finish = events[-1]
        assert isinstance(finish, Finish) and released == finish.text
        assert not oracle_matches(terms, finish.text), finish.text
        if seed is None:
            rollbacks = [e for e in events if isinstance(e, Rollback)]
            assert rollbacks and rollbacks[0].position == expected, (rollbacks, unguarded.text)
