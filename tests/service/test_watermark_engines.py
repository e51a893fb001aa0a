"""``POST /v1/watermark/detect`` on each engine: it scores where the engine declares the model's config
(``EngineCapabilities.model_config``), and answers 400 naming the engine where it does not — never a 500.

The transformers engine: the session's shared service (slow: it loads SmolLM2). The remote engine: the service
started in this process in front of a scripted upstream over HTTP (tests/helpers/scripted_upstream.py: a fake,
because no real upstream — vLLM's server, llama.cpp's — runs on this machine; the real one is
tests/engines/remote/gateway). The vLLM engine: tests/engines/vllm/test_vllm_service.py (needs vLLM).
"""

from __future__ import annotations

import httpx
import pytest
from helpers.scripted_upstream import ScriptedUpstream, serve_scripted
from helpers.service import CLIENT_KEY, MODEL, serve_in_thread

AUTH = {"Authorization": f"Bearer {CLIENT_KEY}"}


@pytest.fixture(scope="module")
def gateway(smollm2_tokenizer, tmp_path_factory):
    """``GUARDRAIL_ENGINE=remote`` (tokenizer only) in front of a scripted upstream."""
    from service.settings import Settings

    base = smollm2_tokenizer.encode("Hello", add_special_tokens=False)
    script = smollm2_tokenizer.encode(" there, friend.", add_special_tokens=False)
    with serve_scripted(ScriptedUpstream(smollm2_tokenizer, base, script)) as url:
        settings = Settings(model=MODEL, engine="remote", upstream_url=url, tokenizer=MODEL, api_keys=[CLIENT_KEY],
                            data_dir=tmp_path_factory.mktemp("gateway-data"), wordlists=["en"],
                            upstream_retries=0)
        with serve_in_thread(settings) as live:
            yield live


def test_the_remote_engine_refuses_watermark_detection_by_name(gateway):
    for body, param in (({"text": "Some text to score for a watermark."}, "text"),
                        ({"token_ids": [1, 2, 3]}, "token_ids")):
        response = gateway.post("/v1/watermark/detect", json=body, headers=AUTH)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["message"] == ("watermark detection needs the model config; engine 'remote' does not provide "
                                    "it (docs/engines.md)")
        assert (error["param"], error["code"]) == (param, "unsupported_engine")


def test_the_remote_engine_declares_what_the_service_asks(gateway):
    capabilities = gateway.runtime.engine.capabilities
    assert capabilities.model_config is None and capabilities.upstream
    assert not (capabilities.structured_output or capabilities.watermark or capabilities.logprobs)
    # ...so the structured-output check refuses by capability, naming the engine.
    response = httpx.post(f"{gateway.base_url}/v1/chat/completions", headers=AUTH, timeout=30, json={
        "model": MODEL, "messages": [{"role": "user", "content": "Hello"}],
        "response_format": {"type": "json_object"}})
    assert response.status_code == 400, response.text
    assert "not by the remote engine" in response.json()["error"]["message"]


def test_the_transformers_engine_scores_token_ids_with_the_models_config(service):
    config = service.runtime.engine.capabilities.model_config
    assert config.vocab_size == service.runtime.model.config.get_text_config().vocab_size
    ids = service.runtime.tokenizer.encode("A plain sentence that nobody watermarked at all.",
                                           add_special_tokens=False)
    response = service.post("/v1/watermark/detect", json={"token_ids": ids}, headers=AUTH)
    assert response.status_code == 200, response.text
    verdict = response.json()
    assert verdict["tokens_scored"] == len(ids) - 1 and verdict["prediction"] is False
