"""Logprobs on the transformers engine, single-stream and batched (real SmolLM2, float32): the records are
the kept tokens' (never a rolled-back one's), spell the answer, and hold the model's raw log-probabilities —
checked against one plain forward pass over prompt + answer (docs/design.md, "Logprobs: the release rule")."""

from __future__ import annotations

import pytest
import torch

from guardrail.engines.transformers.batched import BatchedDecoder
from guardrail.guard.events import Finish, Rollback, TextDelta
from guardrail.matching.compiler import compile_artefact
from guardrail.params import SamplingParams
from guardrail.prompts import prompt_ids
from guardrail.wordlists.wordlist import wordlist_from_terms

pytestmark = pytest.mark.slow

#: The wall-clock limit is not what these tests check (a loaded machine would end a stream with "length").
NO_DEADLINE = 3600.0
QUESTIONS = ["What is the capital of France?", "Name three colours of the rainbow."]


@pytest.fixture(scope="module")
def artefact(smollm2_decoder):
    return compile_artefact(smollm2_decoder.vocab, [wordlist_from_terms(["Paris", "red"], name="targets")])


@pytest.fixture(scope="module")
def jobs(smollm2_tokenizer, artefact):
    params = [SamplingParams(temperature=0, max_tokens=20, logprobs=3, timeout_s=NO_DEADLINE),
              # A processor before the pick: the logprobs stay the model's raw ones.
              SamplingParams(temperature=0, max_tokens=20, logprobs=2, repetition_penalty=1.3, timeout_s=NO_DEADLINE)]
    return [(prompt_ids(smollm2_tokenizer, messages=[{"role": "user", "content": q}]), artefact, p)
            for q, p in zip(QUESTIONS, params)]


def records_of(events):
    return [r for e in events if isinstance(e, TextDelta) for r in e.logprobs]


def raw_logprobs(model, prompt, answer) -> list[float]:
    """The model's own log-probability of each answer token after prompt + the answer before it."""
    with torch.inference_mode():
        logits = model(torch.tensor([prompt + answer])).logits[0].float()
    steps = torch.log_softmax(logits[len(prompt) - 1:len(prompt) - 1 + len(answer)], dim=-1)
    return [float(steps[i, token]) for i, token in enumerate(answer)]


def test_the_records_are_the_kept_tokens_with_the_models_raw_logprobs(smollm2_decoder, smollm2_model, jobs):
    events = list(smollm2_decoder.stream(*jobs[0]))
    finish = events[-1]
    assert isinstance(finish, Finish)
    assert any(isinstance(e, Rollback) for e in events)  # the model says "Paris": rolled back
    records = records_of(events)
    assert [r.token_id for r in records] == list(finish.token_ids)
    assert "".join(r.token for r in records) == finish.text
    expected = raw_logprobs(smollm2_model, jobs[0][0], list(finish.token_ids))
    # Also at the re-picked position: the model's distribution, not one renormalised without the banned token.
    assert [r.logprob for r in records] == pytest.approx(expected, abs=2e-3)
    for record in records:
        assert 1 <= len(record.top) <= 3 and "Paris" not in "".join(t.token for t in record.top)


def test_a_processor_does_not_change_the_reported_logprobs(smollm2_decoder, smollm2_model, jobs):
    events = list(smollm2_decoder.stream(*jobs[1]))
    finish = events[-1]
    records = records_of(events)
    assert [r.token_id for r in records] == list(finish.token_ids)
    expected = raw_logprobs(smollm2_model, jobs[1][0], list(finish.token_ids))
    assert [r.logprob for r in records] == pytest.approx(expected, abs=2e-3)


def test_batched_rows_report_what_the_single_stream_reports(smollm2_decoder, jobs):
    alone = [records_of(smollm2_decoder.stream(*job)) for job in jobs]
    batched = BatchedDecoder(smollm2_decoder, max_batch=4).generate(jobs, join_at=[0, 3])
    for single, events in zip(alone, batched):
        records = records_of(events)
        assert [(r.token_id, r.token, r.bytes) for r in records] == [(r.token_id, r.token, r.bytes) for r in single]
        assert [r.logprob for r in records] == pytest.approx([r.logprob for r in single], abs=2e-3)
        assert [[t.token_id for t in r.top] for r in records] == [[t.token_id for t in r.top] for r in single]
