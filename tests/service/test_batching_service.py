"""The service decodes through the batched loop and reports the rows of every forward pass, the prompt tokens
served from the prefix cache, and the drafted and accepted tokens of speculative decoding."""


import pytest
from helpers.paths import load_data
from helpers.service import metric

REPETITIVE = load_data("repetitive_prompts.json")

pytestmark = pytest.mark.slow


def test_each_decode_step_observes_its_batch_size(service):
    before = metric(service.metrics(), "guardrail_batch_size_count")
    response = service.chat(max_tokens=4, temperature=0, speculative=False)  # one pass per token
    assert response.status_code == 200
    after = service.metrics()
    tokens = response.json()["usage"]["completion_tokens"]
    assert metric(after, "guardrail_batch_size_count") - before >= tokens - 1  # one pass per kept token
    assert metric(after, "guardrail_batch_size_bucket", le="1.0") == metric(after, "guardrail_batch_size_count")


def test_usage_and_metrics_report_cached_prompt_tokens_and_accepted_drafts(service):
    before = service.metrics()
    content = REPETITIVE[0]["prompt"]
    first = service.chat(content, max_tokens=40).json()
    again = service.chat(content, max_tokens=40).json()  # the same prompt: its head is in the prefix cache
    off = service.chat(content, max_tokens=40, speculative=False).json()
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] >= 8
    assert again["choices"][0]["message"]["content"] == first["choices"][0]["message"]["content"]
    assert off["choices"][0]["message"]["content"] == first["choices"][0]["message"]["content"]
    assert first["usage"]["accepted_draft_tokens"] > 0  # the answer copies the prompt: drafts are accepted
    assert off["usage"]["draft_tokens"] == 0
    after = service.metrics()
    drafted = sum(r["usage"]["draft_tokens"] for r in (first, again, off))
    accepted = sum(r["usage"]["accepted_draft_tokens"] for r in (first, again, off))
    cached = sum(r["usage"]["prompt_tokens_details"]["cached_tokens"] for r in (first, again, off))
    assert metric(after, "guardrail_draft_tokens_total") - metric(before, "guardrail_draft_tokens_total") == drafted
    assert (metric(after, "guardrail_accepted_draft_tokens_total")
            - metric(before, "guardrail_accepted_draft_tokens_total")) == accepted
    assert (metric(after, "guardrail_prompt_cached_tokens_total")
            - metric(before, "guardrail_prompt_cached_tokens_total")) == cached
