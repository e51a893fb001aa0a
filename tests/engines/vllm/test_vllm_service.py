"""The service on the vLLM engine (``GUARDRAIL_ENGINE=vllm``): the same OpenAI API, guarded."""

import pytest

pytest.importorskip("vllm.v1.sample.logits_processor")

from helpers.service import CLIENT_KEY, MODEL, metric, metric_total, start_service_process  # noqa: E402

from guardrail.matching.textmatch import TextMatcher  # noqa: E402
from guardrail.wordlists.wordlist import wordlist_from_terms  # noqa: E402

pytestmark = pytest.mark.slow


def test_the_service_on_vllm_streams_a_guarded_answer(tmp_path):
    server = start_service_process(tmp_path, {
        "GUARDRAIL_ENGINE": "vllm", "GUARDRAIL_API_KEYS": CLIENT_KEY, "GUARDRAIL_MAX_CONCURRENT": "4",
        "GUARDRAIL_VLLM_ENGINE_ARGS": '{"enforce_eager": true}',
    })
    try:
        from openai import OpenAI

        client = OpenAI(base_url=f"{server.base_url}/v1", api_key=CLIENT_KEY, max_retries=0, timeout=300)
        request = {"model": MODEL, "messages": [{"role": "user", "content": "Apologize to me for being late."}],
                   "temperature": 0, "max_tokens": 24}
        plain = client.chat.completions.create(**request)
        assert "sorry" in plain.choices[0].message.content.lower()  # the model would say it...
        stream = client.chat.completions.create(**request, stream=True, stream_options={"include_usage": True},
                                                extra_body={"banned_terms": ["sorry"]})
        text, usage = "", None
        verifier = TextMatcher([wordlist_from_terms(["sorry"])])
        for chunk in stream:
            usage = chunk.usage or usage
            for choice in chunk.choices:
                text += choice.delta.content or ""
                assert verifier.scan(text) == [], text  # ...and no streamed prefix shows it
        assert text and usage.model_extra["rollbacks"] >= 1
        # The metrics count what the answers' usage says, as on the embedded engine (tests/test_service_metrics.py).
        scraped = server.metrics()
        kept = plain.usage.completion_tokens + usage.completion_tokens
        assert metric(scraped, "guardrail_generation_tokens_total", model_name=MODEL) == kept
        assert metric(scraped, "guardrail_request_generation_tokens_sum", model_name=MODEL) == kept
        assert metric(scraped, "guardrail_prompt_tokens_total", model_name=MODEL) == (
            plain.usage.prompt_tokens + usage.prompt_tokens)
        assert metric(scraped, "guardrail_request_rollbacks_sum") == usage.model_extra["rollbacks"]
        assert metric(scraped, "guardrail_rollbacks_total", list="request") == usage.model_extra["rollbacks"]
        assert metric(scraped, "guardrail_guard_step_seconds_count") == 2
        assert metric(scraped, "guardrail_prompt_cached_tokens_total") <= metric(
            scraped, "guardrail_prompt_tokens_total", model_name=MODEL)
        # ...and both answers came from vLLM: the embedded engine's batch loop observes every decode step in
        # guardrail_batch_size, and on vLLM it is not built. vLLM's own families are on /metrics beside ours,
        # counting the tokens of both requests and of the rollback's resubmissions.
        assert metric(scraped, "guardrail_batch_size_count") == 0
        assert metric_total(scraped, "vllm:request_success_total") >= 2
        assert metric_total(scraped, "vllm:generation_tokens_total") >= kept
        assert "vllm:kv_cache_usage_perc" in scraped
        # The vLLM engine declares the model's config (EngineCapabilities.model_config): the watermark route
        # scores with it (the plain answer carries no mark), where it used to fail with a 500.
        detected = server.post("/v1/watermark/detect", json={"text": plain.choices[0].message.content},
                               headers={"Authorization": f"Bearer {CLIENT_KEY}"})
        assert detected.status_code == 200, detected.text
        assert detected.json()["prediction"] is False and detected.json()["tokens_scored"] >= 1
    finally:
        server.stop()
