"""``guardrail serve --engine remote`` in front of vLLM's real OpenAI server (SmolLM2, prefix caching on).

In order: the tokenizer check at start-up, identity with the upstream when nothing is banned, the leak suite
(greedy and sampled), a rollback beside a concurrent stream, and last the upstream killed mid-stream (the
``upstream`` fixture starts it again for any later test).
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from helpers.paths import load_data
from helpers.service import ROOT, clean_env, free_port
from helpers.wait import wait_until

from guardrail.matching.textmatch import TextMatcher
from guardrail.models import load_tokenizer
from guardrail.prompts import prompt_ids
from guardrail.wordlists.wordlist import wordlist_from_terms

LEAK_PROMPTS = load_data("leak_prompts.json")
MODEL = "smollm2"


def sse(base_url: str, path: str, body: dict) -> tuple[list[dict], bool]:
    """The data items of a streamed answer (``[DONE]`` excluded) and whether ``[DONE]`` came."""
    items, done = [], False
    with httpx.stream("POST", base_url + path, json={**body, "stream": True}, timeout=300) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if line.startswith("data: "):
                if line == "data: [DONE]":
                    done = True
                else:
                    items.append(json.loads(line[len("data: "):]))
    return items, done


def chat_stream(gateway, content: str, **body) -> tuple[list[str], dict, dict]:
    """(content pieces, the usage chunk's usage, the finish chunk's choice) of a streamed chat answer."""
    request = {"model": MODEL, "messages": [{"role": "user", "content": content}], "temperature": 0,
               "max_tokens": 24, "stream_options": {"include_usage": True}, **body}
    items, done = sse(gateway.base_url, "/v1/chat/completions", request)
    assert done and not [i for i in items if "error" in i], items
    pieces = [c["delta"].get("content") or "" for i in items for c in i["choices"]]
    finish = next(c for i in items for c in i["choices"] if c.get("finish_reason"))
    usage = next(i["usage"] for i in items if i.get("usage"))
    return pieces, usage, finish


def test_a_gateway_with_another_tokenizer_refuses_to_start(upstream, tmp_path):
    port = free_port()
    done = subprocess.run(
        [sys.executable, "-m", "service.cli.main", "serve", "--port", str(port), "--engine", "remote", "--upstream",
         upstream.url, "--tokenizer", "gemma3"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env=clean_env({"GUARDRAIL_DATA_DIR": str(tmp_path)}))
    assert done.returncode != 0
    assert "tokenizer mismatch" in done.stdout + done.stderr


def test_without_lists_the_gateway_answers_what_the_upstream_answers(gateway, upstream):
    tokenizer = load_tokenizer(MODEL)
    for content in ("What is the capital of France?", "Write a haiku about the sea."):
        ids = prompt_ids(tokenizer, messages=[{"role": "user", "content": content}])
        direct = httpx.post(f"{upstream.url}/v1/completions", timeout=300, json={
            "model": str(upstream.model_dir), "prompt": ids, "max_tokens": 40, "temperature": 0,
            "return_token_ids": True}).json()["choices"][0]
        pieces, usage, finish = chat_stream(gateway, content, max_tokens=40, wordlists=[])
        assert "".join(pieces) == tokenizer.decode(direct["token_ids"], skip_special_tokens=True)
        assert usage["completion_tokens"] == len([t for t in direct["token_ids"] if t not in tokenizer.all_special_ids])
        assert usage["rollbacks"] == 0


@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "sampled"])
def test_the_leak_suite_through_the_gateway(gateway, upstream, sampled):
    cases = LEAK_PROMPTS if not sampled else LEAK_PROMPTS[::4]
    rollbacks = 0
    for case in cases:
        verifier = TextMatcher([wordlist_from_terms([case["term"]])])
        body = {"temperature": 0.8, "seed": 7} if sampled else {}
        pieces, usage, _ = chat_stream(gateway, case["prompt"], banned_terms=[case["term"]], wordlists=[],
                                       max_tokens=min(48, case["tokens_to_term"] + 8), **body)
        streamed = ""
        for piece in pieces:
            streamed += piece
            assert verifier.scan(streamed) == [], (case, streamed)
        rollbacks += usage["rollbacks"]
    assert rollbacks > 0  # the suite's prompts lead the model to its terms: the guard had work to do


def test_a_rollback_beside_a_concurrent_stream(gateway, upstream):
    plain_alone, _, _ = chat_stream(gateway, "Name three colours.", max_tokens=32, wordlists=[])
    with ThreadPoolExecutor(2) as pool:
        guarded = pool.submit(chat_stream, gateway, "Apologize to me for being late.", max_tokens=32,
                              wordlists=[], banned_terms=["sorry"])
        plain = pool.submit(chat_stream, gateway, "Name three colours.", max_tokens=32, wordlists=[])
        pieces, usage, _ = guarded.result()
        assert plain.result()[0] == plain_alone  # the other stream's rollback did not touch this one
    assert usage["rollbacks"] >= 1 and "sorry" not in "".join(pieces).lower()


def test_an_upstream_killed_mid_stream_ends_the_stream_with_an_error_then_done(gateway, upstream):
    request = {"model": MODEL, "messages": [{"role": "user", "content": "Tell me a long story."}],
               "temperature": 0, "max_tokens": 400, "ignore_eos": True, "wordlists": [], "stream": True}
    items, done, killed = [], False, False
    with httpx.stream("POST", gateway.base_url + "/v1/chat/completions", json=request, timeout=300) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done = True
                continue
            items.append(json.loads(line[len("data: "):]))
            if not killed and any(c["delta"].get("content") for c in items[-1].get("choices", ())):
                upstream.kill()  # SIGKILL while the answer streams
                killed = True
    assert killed and done
    assert "error" in items[-1] and items[-1]["error"]["code"] == "generation_failed", items[-1]
    # Once the health probe saw it down, requests get 503 with Retry-After before any stream starts.
    wait_until(lambda: not gateway.get("/readyz").json()["checks"]["engine"]["up"], 30, "engine down in /readyz")
    refused = gateway.post("/v1/chat/completions", json={**request, "stream": False})
    assert refused.status_code == 503 and int(refused.headers["Retry-After"]) >= 1, refused.text
