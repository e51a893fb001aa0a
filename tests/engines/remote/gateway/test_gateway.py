"""``guardrail serve --engine remote`` in front of vLLM's real OpenAI server (SmolLM2, prefix caching on).

In order: the tokenizer check at start-up, identity with the upstream when nothing is banned, the leak suite
(greedy and sampled) and the upstream requests a rollback costs, through both ways the gateway bans on vLLM
(``logit_bias`` and a one-token re-pick; guardrail's logits processor, one request), a rollback beside a
concurrent stream, and last the upstream killed mid-stream (the ``upstream`` fixture starts it again for any
later test). The checks every upstream must pass are in tests/helpers/gateway.py (the llama.cpp suite runs them
too).
"""

from __future__ import annotations

import httpx
import pytest
from helpers.gateway import (
    LEAK_PROMPTS,
    MODEL,
    chat_stream,
    check_another_tokenizer_is_refused,
    check_leak_suite,
    check_rollback_beside_a_concurrent_stream,
    check_upstream_killed_mid_stream,
    counter,
)

from guardrail.models import load_tokenizer
from guardrail.prompts import prompt_ids

#: The two ways the gateway bans on vLLM's server: logit_bias and a one-token re-pick (any server), or exact
#: masks through guardrail's logits processor, a rollback in one request (docs/engines.md).
BAN_MODES = ["gateway", "gateway_processor"]
MODE_IDS = ["logit_bias", "logits_processor"]


def test_a_gateway_with_another_tokenizer_refuses_to_start(upstream, tmp_path):
    check_another_tokenizer_is_refused(upstream.url, tmp_path)


@pytest.mark.parametrize("mode", BAN_MODES, ids=MODE_IDS)
def test_without_lists_the_gateway_answers_what_the_upstream_answers(request, upstream, mode):
    gateway = request.getfixturevalue(mode)
    tokenizer = load_tokenizer(MODEL)
    for content in ("What is the capital of France?", "Write a haiku about the sea."):
        ids = prompt_ids(tokenizer, messages=[{"role": "user", "content": content}])
        direct = httpx.post(f"{upstream.url}/v1/completions", timeout=300, json={
            "model": upstream.model, "prompt": ids, "max_tokens": 40, "temperature": 0,
            "return_token_ids": True}).json()["choices"][0]
        pieces, usage, finish = chat_stream(gateway, content, max_tokens=40, wordlists=[])
        assert "".join(pieces) == tokenizer.decode(direct["token_ids"], skip_special_tokens=True)
        assert usage["completion_tokens"] == len([t for t in direct["token_ids"] if t not in tokenizer.all_special_ids])
        assert usage["rollbacks"] == 0


@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "sampled"])
@pytest.mark.parametrize("mode", BAN_MODES, ids=MODE_IDS)
def test_the_leak_suite_through_the_gateway(request, upstream, mode, sampled):
    check_leak_suite(request.getfixturevalue(mode), sampled)


@pytest.mark.parametrize("mode", BAN_MODES, ids=MODE_IDS)
def test_upstream_requests_per_rollback(request, upstream, mode):
    """A rollback costs a re-pick request and a continuation on a stock server (fewer when the re-pick ends the
    answer), one request through guardrail's logits processor; no banned token comes back either way."""
    gateway = request.getfixturevalue(mode)
    cases = LEAK_PROMPTS[:8]
    before = counter(gateway, "guardrail_upstream_requests_total")
    returned = counter(gateway, "guardrail_upstream_banned_returned_total")
    repicks = 0
    for case in cases:
        _, usage, _ = chat_stream(gateway, case["prompt"], banned_terms=[case["term"]], wordlists=[],
                                  max_tokens=case["tokens_to_term"] + 8)
        assert usage["reprefills"] == usage["rollbacks"], usage  # each rollback re-picks its position once
        repicks += usage["reprefills"]
    requests = counter(gateway, "guardrail_upstream_requests_total") - before
    assert repicks > 0
    if mode == "gateway_processor":
        assert requests == len(cases) + repicks
    else:
        assert len(cases) + repicks < requests <= len(cases) + 2 * repicks
    assert counter(gateway, "guardrail_upstream_banned_returned_total") == returned


def test_a_rollback_beside_a_concurrent_stream(gateway, upstream):
    check_rollback_beside_a_concurrent_stream(gateway)


def test_an_upstream_killed_mid_stream_ends_the_stream_with_an_error_then_done(gateway, upstream):
    check_upstream_killed_mid_stream(gateway, upstream)


def test_watermark_detection_is_refused_naming_the_engine(gateway):
    # The gateway knows the upstream's tokenizer, not its model's config (EngineCapabilities.model_config is
    # None): a 400 naming the engine, never a 500.
    response = gateway.post("/v1/watermark/detect", json={"text": "Some text to score."})
    assert response.status_code == 400, response.text
    assert "engine 'remote' does not provide it" in response.json()["error"]["message"]
