"""``guardrail serve --engine remote`` in front of llama.cpp's real ``llama-server`` (SmolLM2 Q4_1 GGUF), and
llama-cpp-python's server refused.

In order: the API detected and the tokenizer check at start-up, llama-cpp-python's server refused (it takes and
returns text only), identity with llama-server when nothing is banned (greedy), ids the stream held back
(a token ending inside a UTF-8 character) asked for again, the leak suite, a rollback beside a concurrent
stream, and last llama-server killed mid-stream.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from helpers.paths import load_data
from helpers.service import ROOT, clean_env, free_port
from helpers.wait import wait_until

from guardrail.engines.remote.engine import RemoteEngine
from guardrail.guard.events import Completion
from guardrail.matching.textmatch import TextMatcher
from guardrail.matching.vocab import TokenVocab
from guardrail.models import load_tokenizer
from guardrail.params import SamplingParams
from guardrail.prompts import prompt_ids
from guardrail.wordlists.wordlist import wordlist_from_terms

LEAK_PROMPTS = load_data("leak_prompts.json")
MODEL = "smollm2"
#: Prompts whose greedy answers on SmolLM2 hold characters of several bytes (accents, emoji, CJK): SmolLM2's
#: byte-level BPE splits many of them over tokens, and llama-server's stream holds such ids back.
MULTIBYTE_PROMPTS = ("Write the word 'coffee' in Japanese, Chinese and Korean.",
                     "Reply with five emoji about the sea, nothing else.",
                     "Translate 'I am very happy' into French and Spanish.")


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


def direct(upstream, ids: list[int], max_tokens: int) -> list[int]:
    """llama-server's own greedy answer to ``ids`` (non-streamed: every id decoded)."""
    answer = httpx.post(f"{upstream.url}/completion", timeout=300, json={
        "prompt": ids, "n_predict": max_tokens, "temperature": 0, "return_tokens": True, "cache_prompt": True,
        "repeat_penalty": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0})
    assert answer.status_code == 200, answer.text
    return [int(t) for t in answer.json()["tokens"]]


def test_a_gateway_with_another_tokenizer_refuses_to_start(upstream, tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "service.cli.main", "serve", "--port", str(free_port()), "--engine", "remote",
         "--upstream", upstream.url, "--tokenizer", "gemma3"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=clean_env({"GUARDRAIL_DATA_DIR": str(tmp_path)}))
    assert done.returncode != 0
    assert "tokenizer mismatch" in done.stdout + done.stderr


def test_llama_cpp_python_server_is_refused_as_it_takes_and_returns_text_only(llama_cpp_python_server, tmp_path):
    tokenizer = load_tokenizer(MODEL)
    ids = tokenizer.encode("The quick brown fox", add_special_tokens=False)
    # What its API offers: a prompt of token ids is refused (prompt: str | list[str]), and the stream is text.
    refused = httpx.post(f"{llama_cpp_python_server.url}/v1/completions", json={"prompt": ids, "max_tokens": 1},
                         timeout=300)
    assert refused.status_code == 422, refused.text
    items, done = sse(llama_cpp_python_server.url, "/v1/completions",
                      {"prompt": "The quick brown fox", "max_tokens": 2, "temperature": 0})
    assert done and items and all("token_ids" not in c for i in items for c in i["choices"])
    started = subprocess.run(
        [sys.executable, "-m", "service.cli.main", "serve", "--port", str(free_port()), "--engine", "remote",
         "--upstream", llama_cpp_python_server.url, "--tokenizer", "smollm2"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=clean_env({"GUARDRAIL_DATA_DIR": str(tmp_path)}))
    assert started.returncode != 0
    assert "llama-cpp-python's server" in started.stdout + started.stderr


def test_without_lists_the_gateway_answers_what_llama_server_answers(gateway, upstream):
    tokenizer = load_tokenizer(MODEL)
    for content in ("What is the capital of France?", "Write a haiku about the sea.", MULTIBYTE_PROMPTS[0]):
        ids = prompt_ids(tokenizer, messages=[{"role": "user", "content": content}])
        expected = direct(upstream, ids, 40)
        pieces, usage, _ = chat_stream(gateway, content, max_tokens=40, wordlists=[])
        assert "".join(pieces) == tokenizer.decode(expected, skip_special_tokens=True)
        assert usage["completion_tokens"] == len([t for t in expected if t not in tokenizer.all_special_ids])
        assert usage["rollbacks"] == 0


def test_ids_the_stream_held_back_are_asked_for_again(upstream):
    """A token that ends inside a UTF-8 character gets no stream chunk of its own: the engine sees the gap
    (``tokens_predicted``) and asks for the tokens again in one response; the ids match llama-server's own."""
    tokenizer = load_tokenizer(MODEL)
    engine = RemoteEngine(upstream.url, tokenizer, TokenVocab.from_tokenizer(tokenizer), api="llamacpp")
    engine.start()
    withheld = 0
    try:
        for content in MULTIBYTE_PROMPTS:
            ids = prompt_ids(tokenizer, messages=[{"role": "user", "content": content}])
            done = Completion.from_events(engine.stream(ids, None, SamplingParams(temperature=0, max_tokens=32),
                                                        threading.Event()))
            assert list(done.token_ids) == [t for t in direct(upstream, ids, 32) if t not in engine.eos_ids][:32]
            withheld += done.usage.withheld
    finally:
        engine.close()
    assert withheld > 0  # the prompts did produce split characters: the recovery ran


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


def test_llama_server_killed_mid_stream_ends_the_stream_with_an_error_then_done(gateway, upstream):
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
    wait_until(lambda: not gateway.get("/readyz").json()["checks"]["engine"]["up"], 30, "engine down in /readyz")
    refused = gateway.post("/v1/chat/completions", json={**request, "stream": False})
    assert refused.status_code == 503 and int(refused.headers["Retry-After"]) >= 1, refused.text
