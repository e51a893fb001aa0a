"""The leak suite: chat prompts on which unguarded greedy SmolLM2 says an everyday term.

``data/leak_prompts.json`` holds each prompt, its target term and how many tokens the unguarded greedy
answer takes to say it (measured; the first test re-checks it so the suite stays meaningful when the model
or tokenizer changes). Guarded, with every target banned at once, neither the answer nor any streamed
prefix contains a target — checked with the text contract (``TextMatcher``) — greedy and at temperature 1.0
over five seeds.
"""


import pytest
from helpers.paths import load_data

from guardrail.guard.events import Finish, TextDelta
from guardrail.matching.compiler import compile_artefact
from guardrail.matching.obfuscation import OFF  # the artefacts here compile the lists as they are
from guardrail.matching.textmatch import TextMatcher
from guardrail.params import SamplingParams
from guardrail.prompts import prompt_ids
from guardrail.wordlists.wordlist import wordlist_from_terms

pytestmark = pytest.mark.slow

LEAKS = load_data("leak_prompts.json")
TARGETS = [wordlist_from_terms(sorted({case["term"] for case in LEAKS}), name="targets")]
#: Tokens decoded past the point where the unguarded answer says the term (room to evade or re-offend).
MARGIN = 6


def case_id(case):
    return f"{case['term']}:{case['prompt'][:30]}"


@pytest.fixture(scope="module")
def decoder(smollm2_decoder):
    return smollm2_decoder


@pytest.fixture(scope="module")
def artefact(decoder):
    return compile_artefact(decoder.vocab, TARGETS)


def test_suite_is_large_enough():
    assert len(LEAKS) >= 20
    assert len({case["term"].lower() for case in LEAKS}) >= 15


@pytest.mark.parametrize("case", LEAKS, ids=case_id)
def test_unguarded_greedy_says_the_target(decoder, smollm2_tokenizer, case):
    ids = prompt_ids(smollm2_tokenizer, messages=[{"role": "user", "content": case["prompt"]}])
    finish = list(decoder.stream(ids, None, SamplingParams(temperature=0, max_tokens=case["tokens_to_term"])))[-1]
    assert TextMatcher([wordlist_from_terms([case["term"]])]).scan(finish.text), finish.text


@pytest.mark.parametrize("seed", [None, 0, 1, 2, 3, 4], ids=lambda s: "greedy" if s is None else f"seed{s}")
@pytest.mark.parametrize("case", LEAKS, ids=case_id)
def test_guarded_answer_and_every_streamed_prefix_are_free_of_targets(decoder, smollm2_tokenizer, artefact, case,
                                                                      seed):
    ids = prompt_ids(smollm2_tokenizer, messages=[{"role": "user", "content": case["prompt"]}])
    params = SamplingParams(temperature=0 if seed is None else 1.0, seed=seed,
                            max_tokens=case["tokens_to_term"] + MARGIN)
    matcher = TextMatcher(TARGETS, obfuscation=OFF)
    released = ""
    events = list(decoder.stream(ids, artefact, params))
    for event in events[:-1]:
        assert not isinstance(event, Finish)
        if isinstance(event, TextDelta):
            released += event.text
            assert matcher.scan(released) == [], released
    finish = events[-1]
    assert isinstance(finish, Finish)
    assert released == finish.text
    assert matcher.scan(finish.text) == [], finish.text
