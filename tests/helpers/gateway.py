"""What the gateway's real-server suites share (tests/engines/remote/gateway: vLLM's OpenAI server;
tests/engines/remote/llamacpp: llama.cpp's llama-server): the gateway started in front of an upstream, a
streamed chat answer read, and the checks every upstream must pass — the leak suite, a rollback beside a
concurrent stream, the upstream killed mid-stream, another tokenizer refused at start-up."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from guardrail.matching.textmatch import TextMatcher
from guardrail.wordlists.wordlist import wordlist_from_terms
from helpers.paths import load_data
from helpers.service import ROOT, ServiceProcess, clean_env, free_port, start_service_process
from helpers.wait import wait_until

LEAK_PROMPTS = load_data("leak_prompts.json")
MODEL = "smollm2"
#: Seconds a gateway may take to check its upstream and become ready (a deadline, not a speed claim).
READY_TIMEOUT_S = 120


def start_gateway(upstream_url: str, tmp: Path, env: dict[str, str] | None = None) -> ServiceProcess:
    """``guardrail serve --engine remote --upstream URL --tokenizer smollm2`` (the ``en`` list, a fast health
    probe), once ``/readyz`` reports the engine up."""
    server = start_service_process(tmp, {"GUARDRAIL_UPSTREAM_HEALTH_INTERVAL_S": "0.2", "GUARDRAIL_WORDLISTS": "en",
                                         **(env or {})}, cli=True,
                                   extra_args=["--engine", "remote", "--upstream", upstream_url,
                                               "--tokenizer", MODEL])
    wait_until(lambda: server.get("/readyz").json()["status"] == "ready", READY_TIMEOUT_S, "gateway ready",
               alive=lambda: server.process.poll() is None)
    return server


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


def chat_stream(gateway: ServiceProcess, content: str, **body) -> tuple[list[str], dict, dict]:
    """(content pieces, the usage chunk's usage, the finish chunk's choice) of a streamed chat answer (greedy,
    24 tokens unless ``body`` says otherwise)."""
    request = {"model": MODEL, "messages": [{"role": "user", "content": content}], "temperature": 0,
               "max_tokens": 24, "stream_options": {"include_usage": True}, **body}
    items, done = sse(gateway.base_url, "/v1/chat/completions", request)
    assert done and not [i for i in items if "error" in i], items
    pieces = [c["delta"].get("content") or "" for i in items for c in i["choices"]]
    finish = next(c for i in items for c in i["choices"] if c.get("finish_reason"))
    usage = next(i["usage"] for i in items if i.get("usage"))
    return pieces, usage, finish


def counter(server: ServiceProcess, name: str) -> float:
    """The value of the unlabelled counter ``name`` on ``server``'s ``/metrics``."""
    for family in text_string_to_metric_families(server.get("/metrics").text):
        for sample in family.samples:
            if sample.name == name:
                return sample.value
    raise AssertionError(f"{name} is not on /metrics")


def check_another_tokenizer_is_refused(upstream_url: str, tmp: Path) -> None:
    """A gateway given Gemma 3's tokenizer in front of a SmolLM2 upstream exits at start-up, naming the
    mismatch."""
    done = subprocess.run(
        [sys.executable, "-m", "service.cli.main", "serve", "--port", str(free_port()), "--engine", "remote",
         "--upstream", upstream_url, "--tokenizer", "gemma3"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=clean_env({"GUARDRAIL_DATA_DIR": str(tmp)}))
    assert done.returncode != 0
    assert "tokenizer mismatch" in done.stdout + done.stderr


def check_leak_suite(gateway: ServiceProcess, sampled: bool) -> None:
    """Each leak-suite prompt with its term banned: no streamed prefix holds the term (greedy: all 28 prompts;
    sampled: every fourth, seeded), and the guard did roll back."""
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


def check_rollback_beside_a_concurrent_stream(gateway: ServiceProcess) -> None:
    """A stream that rolls back leaves a concurrent stream's answer as it is alone (greedy)."""
    plain_alone, _, _ = chat_stream(gateway, "Name three colours.", max_tokens=32, wordlists=[])
    with ThreadPoolExecutor(2) as pool:
        guarded = pool.submit(chat_stream, gateway, "Apologize to me for being late.", max_tokens=32,
                              wordlists=[], banned_terms=["sorry"])
        plain = pool.submit(chat_stream, gateway, "Name three colours.", max_tokens=32, wordlists=[])
        pieces, usage, _ = guarded.result()
        assert plain.result()[0] == plain_alone  # the other stream's rollback did not touch this one
    assert usage["rollbacks"] >= 1 and "sorry" not in "".join(pieces).lower()


def check_upstream_killed_mid_stream(gateway: ServiceProcess, upstream) -> None:
    """``upstream.kill()`` (SIGKILL) while an answer streams: the stream ends with an ``error`` event then
    ``[DONE]``; once the health probe saw it down, a request gets 503 with ``Retry-After`` before any stream."""
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
                upstream.kill()
                killed = True
    assert killed and done
    assert "error" in items[-1] and items[-1]["error"]["code"] == "generation_failed", items[-1]
    wait_until(lambda: gateway.get("/readyz").json().get("reason") == "upstream_unavailable", 30,
               "engine down in /readyz")
    refused = gateway.post("/v1/chat/completions", json={**request, "stream": False})
    assert refused.status_code == 503 and int(refused.headers["Retry-After"]) >= 1, refused.text
