"""Service benchmark: time to first token and tokens/s per stream at 1, 4 and 8 concurrent streaming
clients, against the decoder alone (same model, prompt, lists and parameters) measured in the same run.

Prints one JSON object. Floor (issue 4): at 1 client the service keeps >= 0.95 of the decoder's tokens/s
(``overhead_ratio_1_client``: the median over runs of service / decoder tokens/s, each service run paired
with the decoder run just before it); errors must be 0. The service runs in its own process (uvicorn, embedded
store, default list ``en``, one generation at a time as deployed), the decoder in this one, never both
at once; 1-client service runs alternate with decoder runs so that drift on a shared machine hits both.

Per stream: ``ttft_s`` = request sent -> first content chunk; ``tokens_per_s`` = completion tokens /
(request sent -> last byte), so with several clients it includes the wait for the model (requests are
served one after another). ``aggregate_tokens_per_s`` = all tokens / wall time of the burst.

Usage: python bench/service.py [--max-tokens 32] [--repeats 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import httpx  # noqa: E402
import numpy as np  # noqa: E402

from guardrail.engines.transformers.decoder import StreamingDecoder  # noqa: E402
from guardrail.engines.transformers.sampling import SamplingParams  # noqa: E402
from guardrail.guard.events import Finish, TextDelta  # noqa: E402
from guardrail.matching.compiler import compile_artefact  # noqa: E402
from guardrail.matching.vocab import TokenVocab  # noqa: E402
from guardrail.models import load_model, load_tokenizer  # noqa: E402
from guardrail.prompts import prompt_ids  # noqa: E402
from guardrail.wordlists.wordlist import bundled_wordlist  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODEL = "smollm2"
MESSAGES = [{"role": "user", "content": "Write a short story about a robot who learns to paint."}]
CONCURRENCY = (1, 4, 8)
FLOOR = 0.95


def stats(values: list[float]) -> dict[str, float]:
    return {"p50": round(float(np.percentile(values, 50)), 4), "p99": round(float(np.percentile(values, 99)), 4)}


class Decoder:
    """The baseline: the same decode loop the service runs, called directly."""

    def __init__(self, max_tokens: int) -> None:
        tokenizer = load_tokenizer(MODEL)
        self.vocab = TokenVocab.from_tokenizer(tokenizer)
        self.decoder = StreamingDecoder(load_model(MODEL), tokenizer, self.vocab)
        self.prompt = prompt_ids(tokenizer, messages=MESSAGES)
        self.artefact = compile_artefact(self.vocab, [bundled_wordlist("en")])
        self.params = SamplingParams(temperature=0, max_tokens=max_tokens)

    def run(self) -> dict[str, float]:
        started = time.perf_counter()
        first = None
        for event in self.decoder.stream(self.prompt, self.artefact, self.params):
            if isinstance(event, TextDelta) and event.text and first is None:
                first = time.perf_counter() - started
            if isinstance(event, Finish):
                tokens = event.usage.completion_tokens
        seconds = time.perf_counter() - started
        return {"ttft_s": first, "tokens_per_s": tokens / seconds, "tokens": tokens}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_service(data_dir: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GUARDRAIL_") or k == "GUARDRAIL_CACHE_DIR"}
    env.update({"GUARDRAIL_DATA_DIR": data_dir, "GUARDRAIL_MAX_QUEUE": "16", "GUARDRAIL_LOG_LEVEL": "WARNING"})
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--factory", "service.app:create_app", "--host", "127.0.0.1",
         "--port", str(port), "--no-access-log", "--log-level", "warning"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the service exited with {process.returncode}")
        try:
            if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                return process, base
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    process.kill()
    raise SystemExit("the service did not become ready in 300 s")


async def one_stream(client: httpx.AsyncClient, base: str, max_tokens: int) -> dict[str, float]:
    body = {"model": MODEL, "messages": MESSAGES, "temperature": 0, "max_tokens": max_tokens, "stream": True,
            "stream_options": {"include_usage": True}}
    started = time.perf_counter()
    first, tokens = None, None
    async with client.stream("POST", f"{base}/v1/chat/completions", json=body) as response:
        if response.status_code != 200:
            raise RuntimeError(f"HTTP {response.status_code}")
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                raise RuntimeError(chunk["error"]["message"])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            for choice in chunk["choices"]:
                if choice["delta"].get("content") and first is None:
                    first = time.perf_counter() - started
    seconds = time.perf_counter() - started
    return {"ttft_s": first, "tokens_per_s": tokens / seconds, "tokens": tokens}


async def burst(base: str, clients: int, max_tokens: int) -> tuple[list[dict], float, int]:
    async with httpx.AsyncClient(timeout=600) as client:
        started = time.perf_counter()
        results = await asyncio.gather(*(one_stream(client, base, max_tokens) for _ in range(clients)),
                                       return_exceptions=True)
        wall = time.perf_counter() - started
    ok = [r for r in results if isinstance(r, dict)]
    return ok, wall, len(results) - len(ok)


def summary(runs: list[dict], wall: float | None = None) -> dict:
    out = {"ttft_s": stats([r["ttft_s"] for r in runs]), "tokens_per_s": stats([r["tokens_per_s"] for r in runs]),
           "streams": len(runs)}
    if wall is not None:
        out["aggregate_tokens_per_s"] = round(sum(r["tokens"] for r in runs) / wall, 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5, help="1-client runs of each side (alternated)")
    args = parser.parse_args()

    decoder = Decoder(args.max_tokens)
    decoder.run()  # warm-up: first-call allocations
    errors = 0
    with tempfile.TemporaryDirectory() as data_dir:
        process, base = start_service(data_dir)
        try:
            asyncio.run(burst(base, 1, args.max_tokens))  # warm-up: the artefact of the default list
            baseline, single = [], []
            for _ in range(args.repeats):
                baseline.append(decoder.run())
                runs, _, failed = asyncio.run(burst(base, 1, args.max_tokens))
                single += runs
                errors += failed
            service = {"1": summary(single)}
            for clients in CONCURRENCY[1:]:
                runs, wall, failed = asyncio.run(burst(base, clients, args.max_tokens))
                errors += failed
                service[str(clients)] = summary(runs, wall)
        finally:
            process.terminate()
            process.wait(timeout=30)
    decoder_summary = summary(baseline)
    # Paired: run i of the service against the decoder run just before it (same machine load).
    ratio = float(np.median([s["tokens_per_s"] / d["tokens_per_s"] for s, d in zip(single, baseline, strict=True)]))
    ttft_ratio = float(np.median([s["ttft_s"] / d["ttft_s"] for s, d in zip(single, baseline, strict=True)]))
    print(json.dumps({
        "benchmark": "service",
        "model": MODEL,
        "wordlists": ["en"],
        "max_tokens": args.max_tokens,
        "completion_tokens": baseline[0]["tokens"],
        "decoder": decoder_summary,
        "service": service,
        "overhead_ratio_1_client": round(ratio, 4),
        "ttft_ratio_1_client": round(ttft_ratio, 4),
        "floor": FLOOR,
        "meets_floor": ratio >= FLOOR,
        "errors": errors,
    }))


if __name__ == "__main__":
    main()
