"""Gateway benchmark: the same prompts straight to a vLLM OpenAI server and through ``guardrail serve --engine
remote`` in front of it.

Prints one JSON object; every number comes with its baseline measured in the same run (the machine is shared
and noisy: compare ratios):

* ``throughput``: aggregate completion tokens/s of 1 and of 8 concurrent streams, direct (``/v1/completions``
  with the chat-templated token ids) vs through the gateway (``/v1/chat/completions``, the default ``en`` list,
  prompts that hit nothing), ``ignore_eos`` so both decode the same number of tokens. Floor: gateway ≥ 0.9 ×
  direct. Runs alternate (order swapped every rep), ``--reps`` times; medians.
* ``ttft_added_s``: median time to the first text chunk through the gateway without lists minus direct,
  single stream (template rendering, one more HTTP hop, the guard session's bookkeeping). Floor: ≤ 0.020 s.
  ``ttft_s.gateway_guarded``: the same with the ``en`` list, whose hold-back keeps text until no term can
  still begin in it (a word's end, as on every engine): that wait is the guarantee, not overhead.
* ``rollback``: greedy, each ``tests/data/leak_prompts.json`` target banned (``--leaks`` prompts, one at a
  time): hits, upstream requests per rollback, seconds per request.

The upstream is a vLLM OpenAI server that already runs (docs/engines.md shows the command); this script starts
the gateway in front of it (a subprocess, tokenizer only).

Usage: .venv/bin/python bench/gateway.py --upstream http://127.0.0.1:8001 [--tokens 32] [--reps 2] [--leaks 8]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parent.parent

from guardrail.models import load_tokenizer  # noqa: E402
from guardrail.prompts import prompt_ids  # noqa: E402

PROMPTS = ["Name three fruits.", "Count from one to five.", "What is two plus two?",
           "Describe a cat in one sentence.", "Name a large ocean.", "What is the color of grass?",
           "List three musical instruments.", "What do bees make?"]
LEAKS = json.loads((ROOT / "tests" / "data" / "leak_prompts.json").read_text("utf-8"))
MODEL = "smollm2"


def stream(url: str, body: dict) -> tuple[float | None, int, dict | None]:
    """(seconds to the first text chunk, completion tokens, usage) of one streamed request."""
    started, first, usage, pieces = time.perf_counter(), None, None, 0
    with httpx.stream("POST", url, json={**body, "stream": True, "stream_options": {"include_usage": True}},
                      timeout=600) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices") or ():
                text = choice.get("text") or (choice.get("delta") or {}).get("content")
                if text:
                    pieces += 1
                    if first is None:
                        first = time.perf_counter() - started
    return first, (usage or {}).get("completion_tokens", 0), usage


def concurrent(requests: list[tuple[str, dict]]) -> tuple[float, list[float]]:
    """Run the requests at once: (aggregate tokens/s, first-text seconds of each)."""
    started = time.perf_counter()
    with ThreadPoolExecutor(len(requests)) as pool:
        results = list(pool.map(lambda r: stream(*r), requests))
    seconds = time.perf_counter() - started
    return sum(r[1] for r in results) / seconds, [r[0] for r in results if r[0] is not None]


def start_gateway(upstream: str) -> tuple[subprocess.Popen, str]:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GUARDRAIL_")}
    env.update(GUARDRAIL_DATA_DIR=str(ROOT / ".cache" / "bench-gateway"), GUARDRAIL_LOG_LEVEL="WARNING")
    process = subprocess.Popen([sys.executable, "-m", "service.cli.main", "serve", "--port", str(port), "--engine",
                                "remote", "--upstream", upstream, "--tokenizer", MODEL], cwd=ROOT, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit("the gateway did not start (is the upstream up and serving SmolLM2?)")
        try:
            if httpx.get(url + "/readyz", timeout=2).json()["checks"]["engine"]["up"]:
                return process, url
        except (httpx.HTTPError, KeyError, ValueError):
            pass
        time.sleep(0.5)
    process.kill()
    raise SystemExit("the gateway did not become ready within 300 s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True, help="the vLLM OpenAI server's root URL")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--leaks", type=int, default=8)
    args = parser.parse_args()

    tokenizer = load_tokenizer(MODEL)
    upstream_model = httpx.get(args.upstream + "/v1/models", timeout=10).json()["data"][0]["id"]
    process, gateway = start_gateway(args.upstream)
    try:
        def direct(content: str) -> tuple[str, dict]:
            ids = prompt_ids(tokenizer, messages=[{"role": "user", "content": content}])
            return args.upstream + "/v1/completions", {"model": upstream_model, "prompt": ids, "temperature": 0,
                                                       "max_tokens": args.tokens, "ignore_eos": True}

        def guarded(content: str) -> tuple[str, dict]:
            return gateway + "/v1/chat/completions", {
                "model": MODEL, "messages": [{"role": "user", "content": content}], "temperature": 0,
                "max_tokens": args.tokens, "ignore_eos": True}

        concurrent([direct(PROMPTS[0]), guarded(PROMPTS[0])])  # warm both paths (first-request costs)
        throughput: dict[str, dict[str, float]] = {}
        ttft: dict[str, list[float]] = {"direct": [], "gateway_guarded": [], "gateway": []}
        for streams in (1, 8):
            runs: dict[str, list[float]] = {"direct": [], "gateway": []}
            for rep in range(args.reps):
                order = ("direct", "gateway") if rep % 2 == 0 else ("gateway", "direct")
                for name in order:
                    build = direct if name == "direct" else guarded
                    rate, firsts = concurrent([build(p) for p in PROMPTS[:streams]])
                    runs[name].append(rate)
                    if streams == 1:
                        ttft["direct" if name == "direct" else "gateway_guarded"] += firsts
                        if name == "gateway":
                            url, body = guarded(PROMPTS[0])
                            ttft["gateway"] += concurrent([(url, {**body, "wordlists": []})])[1]
            throughput[f"{streams}_streams"] = {
                "direct_tokens_per_s": round(statistics.median(runs["direct"]), 2),
                "gateway_tokens_per_s": round(statistics.median(runs["gateway"]), 2),
                "ratio": round(statistics.median(runs["gateway"]) / statistics.median(runs["direct"]), 3)}

        hits = requests = 0
        started = time.perf_counter()
        for case in LEAKS[:args.leaks]:
            _, _, usage = stream(gateway + "/v1/chat/completions", {
                "model": MODEL, "messages": [{"role": "user", "content": case["prompt"]}], "temperature": 0,
                "max_tokens": case["tokens_to_term"] + 8, "wordlists": [], "banned_terms": [case["term"]]})
            hits += (usage or {}).get("rollbacks", 0)
        seconds = time.perf_counter() - started
        requests = len(LEAKS[:args.leaks])
        report = {
            "upstream": args.upstream, "tokens": args.tokens, "reps": args.reps,
            "throughput": throughput,
            "ttft_s": {name: round(statistics.median(v), 4) for name, v in ttft.items() if v},
            "ttft_added_s": round(statistics.median(ttft["gateway"]) - statistics.median(ttft["direct"]), 4),
            "rollback": {"prompts": requests, "hits": hits, "seconds": round(seconds, 2)},
        }
        print(json.dumps(report))
    finally:
        process.terminate()
        process.wait(timeout=30)


if __name__ == "__main__":
    main()
