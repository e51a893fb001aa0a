"""Service benchmark: time to first token and tokens/s at 1, 4 and 8 concurrent streaming clients, against
the decoder alone (same model, prompts, lists and parameters) measured in the same run.

Prints one JSON object. Floors: at 1 client the service keeps >= 0.95 of the decoder's tokens/s
(``overhead_ratio_1_client``: the median over runs of service / decoder tokens/s, each service run paired
with the decoder run of the same prompt just before it); at 8 clients the aggregate tokens/s is >= 4x that of
1 client (``aggregate_8_over_1_client``, continuous batching) and the time to first token p99 <= 3x that of
1 client (``ttft_p99_8_over_1_client``); errors must be 0. The service runs in its own process (uvicorn,
embedded store, default list ``en``, default settings), the decoder in this one, never both at once.

Prompts: 8 distinct chat prompts; client ``i`` of a burst sends prompt ``i``, and the 1-client runs go
through the same 8 prompts one at a time, so that both sides are over the same prompts (and the same state
of the service's prefix cache: every prompt was sent once before the measured runs).

Per stream: ``ttft_s`` = request sent -> first content chunk; ``tokens_per_s`` = completion tokens /
(request sent -> last byte). ``aggregate_tokens_per_s`` = all tokens / wall time of the burst (for 1 client:
the sum of tokens over the sum of request times).

Usage: python bench/service.py [--max-tokens 48] [--repeats 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import httpx  # noqa: E402
import numpy as np  # noqa: E402
from harness import PROMPTS, percentiles, start_service, user_turn  # noqa: E402

from guardrail.engines.transformers.decoder import StreamingDecoder  # noqa: E402
from guardrail.guard.events import Finish, TextDelta  # noqa: E402
from guardrail.matching.compiler import compile_artefact  # noqa: E402
from guardrail.matching.vocab import TokenVocab  # noqa: E402
from guardrail.models import load_model, load_tokenizer  # noqa: E402
from guardrail.params import SamplingParams  # noqa: E402
from guardrail.prompts import prompt_ids  # noqa: E402
from guardrail.wordlists.wordlist import bundled_wordlist  # noqa: E402

MODEL = "smollm2"
CONCURRENCY = (1, 4, 8)
FLOOR = 0.95
AGGREGATE_FLOOR = 4.0
TTFT_FLOOR = 3.0


def messages(index: int) -> list[dict[str, str]]:
    return user_turn(PROMPTS[index % len(PROMPTS)])


class Decoder:
    """The baseline: the same decode loop the service runs, called directly."""

    def __init__(self, max_tokens: int) -> None:
        tokenizer = load_tokenizer(MODEL)
        self.vocab = TokenVocab.from_tokenizer(tokenizer)
        self.decoder = StreamingDecoder(load_model(MODEL), tokenizer, self.vocab)
        self.prompts = [prompt_ids(tokenizer, messages=messages(i)) for i in range(len(PROMPTS))]
        self.artefact = compile_artefact(self.vocab, [bundled_wordlist("en")])
        self.params = SamplingParams(temperature=0, max_tokens=max_tokens)

    def run(self, index: int) -> dict[str, float]:
        started = time.perf_counter()
        first = None
        for event in self.decoder.stream(self.prompts[index], self.artefact, self.params):
            if isinstance(event, TextDelta) and event.text and first is None:
                first = time.perf_counter() - started
            if isinstance(event, Finish):
                tokens = event.usage.completion_tokens
        seconds = time.perf_counter() - started
        return {"ttft_s": first, "tokens_per_s": tokens / seconds, "tokens": tokens, "seconds": seconds}


async def one_stream(client: httpx.AsyncClient, base: str, max_tokens: int, index: int) -> dict[str, float]:
    body = {"model": MODEL, "messages": messages(index), "temperature": 0, "max_tokens": max_tokens, "stream": True,
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
    return {"ttft_s": first, "tokens_per_s": tokens / seconds, "tokens": tokens, "seconds": seconds}


async def burst(base: str, clients: int, max_tokens: int, first: int = 0) -> tuple[list[dict], float, int]:
    async with httpx.AsyncClient(timeout=600) as client:
        started = time.perf_counter()
        results = await asyncio.gather(*(one_stream(client, base, max_tokens, first + i) for i in range(clients)),
                                       return_exceptions=True)
        wall = time.perf_counter() - started
    ok = [r for r in results if isinstance(r, dict)]
    return ok, wall, len(results) - len(ok)


def summary(runs: list[dict], wall: float | None = None) -> dict:
    out = {"ttft_s": percentiles([r["ttft_s"] for r in runs], digits=4),
           "tokens_per_s": percentiles([r["tokens_per_s"] for r in runs], digits=4), "streams": len(runs)}
    wall = wall if wall is not None else sum(r["seconds"] for r in runs)
    out["aggregate_tokens_per_s"] = round(sum(r["tokens"] for r in runs) / wall, 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=2, help="rounds over the 8 prompts (1 client) and bursts")
    args = parser.parse_args()

    decoder = Decoder(args.max_tokens)
    decoder.run(0)  # warm-up: first-call allocations
    errors = 0
    with tempfile.TemporaryDirectory() as data_dir:
        process, base = start_service(data_dir)
        try:
            # Warm-up: the artefact of the default list, and every prompt once (the prefix cache's steady state).
            asyncio.run(burst(base, len(PROMPTS), args.max_tokens))
            baseline, single = [], []
            for _ in range(args.repeats):
                for index in range(len(PROMPTS)):
                    baseline.append(decoder.run(index))
                    runs, _, failed = asyncio.run(burst(base, 1, args.max_tokens, index))
                    single += runs
                    errors += failed
            service = {"1": summary(single)}
            for clients in CONCURRENCY[1:]:
                bursts: list[dict] = []
                walls = 0.0
                for _ in range(args.repeats):
                    runs, wall, failed = asyncio.run(burst(base, clients, args.max_tokens))
                    errors += failed
                    bursts += runs
                    walls += wall
                service[str(clients)] = summary(bursts, walls)
        finally:
            process.terminate()
            process.wait(timeout=30)
    decoder_summary = summary(baseline)
    # Paired: run i of the service against the decoder run just before it (same prompt, same machine load).
    ratio = float(np.median([s["tokens_per_s"] / d["tokens_per_s"] for s, d in zip(single, baseline, strict=True)]))
    ttft_ratio = float(np.median([s["ttft_s"] / d["ttft_s"] for s, d in zip(single, baseline, strict=True)]))
    aggregate = {c: round(service[c]["aggregate_tokens_per_s"] / service["1"]["aggregate_tokens_per_s"], 3)
                 for c in service}
    ttft_p99 = round(service["8"]["ttft_s"]["p99"] / service["1"]["ttft_s"]["p99"], 3)
    print(json.dumps({
        "benchmark": "service",
        "model": MODEL,
        "wordlists": ["en"],
        "max_tokens": args.max_tokens,
        "prompts": len(PROMPTS),
        "decoder": decoder_summary,
        "service": service,
        "overhead_ratio_1_client": round(ratio, 4),
        "ttft_ratio_1_client": round(ttft_ratio, 4),
        "aggregate_over_1_client": aggregate,
        "ttft_p99_8_over_1_client": ttft_p99,
        "floors": {
            "overhead_1_client>=0.95": ratio >= FLOOR,
            "aggregate_8>=4x_1_client": aggregate["8"] >= AGGREGATE_FLOOR,
            "ttft_p99_8<=3x_1_client": ttft_p99 <= TTFT_FLOOR,
        },
        "errors": errors,
    }))


if __name__ == "__main__":
    main()
