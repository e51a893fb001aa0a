"""``guardrail serve --engine remote`` in front of llama.cpp's real ``llama-server`` (SmolLM2 Q4_1 GGUF), and
llama-cpp-python's server refused.

In order: the API detected and the tokenizer check at start-up, llama-cpp-python's server refused (it takes and
returns text only), identity with llama-server when nothing is banned (greedy), ids the stream held back
(a token ending inside a UTF-8 character) asked for again, the leak suite, a rollback beside a concurrent
stream, and last llama-server killed mid-stream.
"""

from __future__ import annotations

import subprocess
import sys
import threading

import httpx
import pytest
from helpers.gateway import (
    MODEL,
    chat_stream,
    check_another_tokenizer_is_refused,
    check_leak_suite,
    check_rollback_beside_a_concurrent_stream,
    check_upstream_killed_mid_stream,
    sse,
)
from helpers.service import ROOT, clean_env, free_port

from guardrail.engines.remote.engine import RemoteEngine
from guardrail.guard.events import Completion
from guardrail.matching.vocab import TokenVocab
from guardrail.models import load_tokenizer
from guardrail.params import SamplingParams
from guardrail.prompts import prompt_ids

#: Prompts whose greedy answers on SmolLM2 hold characters of several bytes (accents, emoji, CJK): SmolLM2's
#: byte-level BPE splits many of them over tokens, and llama-server's stream holds such ids back.
MULTIBYTE_PROMPTS = ("Write the word 'coffee' in Japanese, Chinese and Korean.",
                     "Reply with five emoji about the sea, nothing else.",
                     "Translate 'I am very happy' into French and Spanish.")


def direct(upstream, ids: list[int], max_tokens: int) -> list[int]:
    """llama-server's own greedy answer to ``ids`` (non-streamed: every id decoded)."""
    answer = httpx.post(f"{upstream.url}/completion", timeout=300, json={
        "prompt": ids, "n_predict": max_tokens, "temperature": 0, "return_tokens": True, "cache_prompt": True,
        "repeat_penalty": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0})
    assert answer.status_code == 200, answer.text
    return [int(t) for t in answer.json()["tokens"]]


def test_a_gateway_with_another_tokenizer_refuses_to_start(upstream, tmp_path):
    check_another_tokenizer_is_refused(upstream.url, tmp_path)


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
    check_leak_suite(gateway, sampled)


def test_a_rollback_beside_a_concurrent_stream(gateway, upstream):
    check_rollback_beside_a_concurrent_stream(gateway)


def test_llama_server_killed_mid_stream_ends_the_stream_with_an_error_then_done(gateway, upstream):
    check_upstream_killed_mid_stream(gateway, upstream)
