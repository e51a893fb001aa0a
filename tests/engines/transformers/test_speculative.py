"""Guarded speculative decoding keeps every request's contract: the same output, the guard on every token.

Real SmolLM2 (float32). Reference: the same decoder with speculation off (``num_tokens=0``). Prompts: the
leak suite (every target banned at once: most requests roll back) and repetitive prompts
(``data/repetitive_prompts.json``: copy, quote, rewrite), where prompt lookup drafts most tokens — with a
word of the copied text banned, so that the drafter proposes the banned term and rollbacks land inside
accepted drafts.
"""

import json

import pytest
from helpers.paths import DATA
from helpers.streams import assert_no_leak, contract

from guardrail.engines.drafting import SpeculativeConfig
from guardrail.engines.transformers.batched import BatchedDecoder
from guardrail.engines.transformers.decoder import StreamingDecoder, generation_eos_ids
from guardrail.matching.compiler import compile_artefact
from guardrail.matching.vocab import TokenVocab
from guardrail.params import SamplingParams
from guardrail.prompts import prompt_ids
from guardrail.wordlists.wordlist import wordlist_from_terms

pytestmark = pytest.mark.slow

LEAKS = json.loads((DATA / "leak_prompts.json").read_text(encoding="utf-8"))
REPETITIVE = json.loads((DATA / "repetitive_prompts.json").read_text(encoding="utf-8"))
TARGETS = [wordlist_from_terms(sorted({case["term"] for case in LEAKS}), name="targets")]
# Words of the repetitive prompts' texts: the model copies them, the drafter proposes them.
COPIED = [wordlist_from_terms(["lamp", "sugar", "borrow", "lazy", "budget", "multiply"], name="copied")]
MARGIN = 6
#: A generation's wall-clock limit (``timeout_s``, 60 s by default) is not what these tests check: on a loaded
#: shared machine it would end a row early ("length") and fail a comparison for no reason.
NO_DEADLINE = 3600.0


@pytest.fixture(scope="module")
def vocab(smollm2_model, smollm2_tokenizer):
    return TokenVocab.from_tokenizer(smollm2_tokenizer, eos_ids=generation_eos_ids(smollm2_model))


@pytest.fixture(scope="module")
def speculative(smollm2_model, smollm2_tokenizer, vocab):
    return StreamingDecoder(smollm2_model, smollm2_tokenizer, vocab)


@pytest.fixture(scope="module")
def plain(smollm2_model, smollm2_tokenizer, vocab):
    return StreamingDecoder(smollm2_model, smollm2_tokenizer, vocab, speculative=SpeculativeConfig(num_tokens=0))


@pytest.fixture(scope="module")
def leak_jobs(smollm2_tokenizer, vocab):
    artefact = compile_artefact(vocab, TARGETS)
    return [(prompt_ids(smollm2_tokenizer, messages=[{"role": "user", "content": case["prompt"]}]), artefact,
             SamplingParams(temperature=0, max_tokens=case["tokens_to_term"] + MARGIN, timeout_s=NO_DEADLINE))
            for case in LEAKS]


@pytest.fixture(scope="module")
def copy_jobs(smollm2_tokenizer, vocab):
    artefact = compile_artefact(vocab, COPIED)
    return [(prompt_ids(smollm2_tokenizer, messages=[{"role": "user", "content": case["prompt"]}]), artefact,
             SamplingParams(temperature=0, max_tokens=64, timeout_s=NO_DEADLINE)) for case in REPETITIVE]


def test_greedy_output_equals_decoding_without_speculation_on_the_leak_suite(speculative, plain, leak_jobs):
    drafted = 0
    for job in leak_jobs:
        got = list(speculative.stream(*job))
        assert contract(got) == contract(list(plain.stream(*job)))
        assert_no_leak(got, TARGETS)
        drafted += got[-1].usage.draft_tokens
    assert drafted > 0  # speculation was on


@pytest.fixture(scope="module")
def copied(speculative, plain, copy_jobs):
    return [(list(speculative.stream(*job)), list(plain.stream(*job))) for job in copy_jobs]


def test_greedy_output_equals_without_speculation_on_repetitive_prompts_with_drafted_banned_words(copied):
    accepted = drafted = 0
    for got, expected in copied:
        assert contract(got) == contract(expected)
        usage = got[-1].usage
        accepted += usage.accepted_draft_tokens
        drafted += usage.draft_tokens
        assert usage.forward_passes <= expected[-1].usage.forward_passes
    assert accepted >= 0.5 * drafted > 0  # prompt lookup predicts copied text
    assert any(got[-1].usage.rollbacks for got, _ in copied)  # the banned words were drafted and refused


def test_a_drafted_banned_word_is_never_released_in_any_chunk(copied):
    for got, _ in copied:
        assert_no_leak(got, COPIED)


def test_seeded_sampling_draws_as_without_speculation_and_never_leaks(speculative, plain, copy_jobs, leak_jobs):
    jobs = [copy_jobs[0], copy_jobs[2], leak_jobs[0], leak_jobs[5]]
    accepted = 0
    for seed in range(5):
        for ids, artefact, params in jobs:
            sampled = SamplingParams(temperature=1.0, top_p=0.95, seed=seed, max_tokens=params.max_tokens,
                                     timeout_s=NO_DEADLINE)
            got = list(speculative.stream(ids, artefact, sampled))
            assert contract(got) == contract(list(plain.stream(ids, artefact, sampled)))
            assert_no_leak(got, TARGETS if artefact is leak_jobs[0][1] else COPIED)
            accepted += got[-1].usage.accepted_draft_tokens
    assert accepted > 0


def test_stop_strings_and_max_tokens_end_the_text_as_without_speculation(speculative, plain, copy_jobs):
    ids, artefact, _ = copy_jobs[0]
    for params in (SamplingParams(temperature=0, max_tokens=9, timeout_s=NO_DEADLINE),
                   SamplingParams(temperature=0, stop=("every",), timeout_s=NO_DEADLINE)):
        got = list(speculative.stream(ids, artefact, params))
        assert contract(got) == contract(list(plain.stream(ids, artefact, params)))
        assert got[-1].usage.completion_tokens <= params.max_tokens


def test_a_request_can_turn_speculation_off(speculative, copy_jobs):
    ids, artefact, params = copy_jobs[0]
    off = SamplingParams(temperature=0, max_tokens=params.max_tokens, speculative=False, timeout_s=NO_DEADLINE)
    usage = list(speculative.stream(ids, artefact, off))[-1].usage
    assert usage.draft_tokens == 0 and usage.accepted_draft_tokens == 0


def test_in_a_batch_drafting_and_plain_rows_share_steps_and_decode_as_alone(speculative, plain, copy_jobs,
                                                                          leak_jobs):
    jobs = copy_jobs[:4] + leak_jobs[:4]
    jobs = [(ids, artefact, SamplingParams(temperature=0, max_tokens=params.max_tokens, speculative=i % 2 == 0,
                                           timeout_s=NO_DEADLINE))
            for i, (ids, artefact, params) in enumerate(jobs)]
    batched = BatchedDecoder(speculative, max_batch=8)
    events = batched.generate(jobs)
    for job, stream in zip(jobs, events, strict=True):
        assert contract(stream) == contract(list(plain.stream(*job)))
        if not job[2].speculative:
            assert stream[-1].usage.draft_tokens == 0
    assert sum(stream[-1].usage.accepted_draft_tokens for stream in events) > 0


def test_sliding_window_models_do_not_speculate(gemma3_model, gemma3_tokenizer):
    vocab = TokenVocab.from_tokenizer(gemma3_tokenizer, eos_ids=generation_eos_ids(gemma3_model))
    decoder = StreamingDecoder(gemma3_model, gemma3_tokenizer, vocab)
    assert decoder.speculative.num_tokens == 0
    ids = gemma3_tokenizer.encode("One, two, three, four, one, two, three, four, one, two,")
    params = SamplingParams(temperature=0, max_tokens=8, timeout_s=NO_DEADLINE)
    usage = list(decoder.stream(ids, None, params))[-1].usage
    assert usage.draft_tokens == 0
