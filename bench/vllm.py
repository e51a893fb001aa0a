"""vLLM engine benchmark: what the guard costs on vLLM, and what a rollback by resubmission costs.

Prints one JSON object; every number comes with its baseline measured in the same run (the machine is
shared and noisy: compare ratios):

* ``throughput``: aggregate tokens/s of 1 and of 8 concurrent streams through :class:`VLLMDriver`, guarded
  (bundled ``en`` list; prompts that hit nothing) vs unguarded (no lists: plain vLLM requests on the same
  engine). Floor: guarded ≥ 0.9 × unguarded. The two runs alternate (order swapped every rep), ``--reps``
  times each; medians.
* ``embedded``: the same single-stream prompts on the embedded engine (``StreamingDecoder``), guarded and not,
  for the side-by-side table.
* ``rollback``: the cost of a resubmission at 128 / 512 / 2,000 tokens of context — the time to the first
  token of ``prompt + 1 kept token`` right after ``prompt`` ran (prefix cache warm: what a rollback costs)
  vs the same length of fresh tokens (a full prefill: what it costs without prefix caching).
* ``leak_suite``: greedy, every target of ``tests/data/leak_prompts.json`` banned, all 28 streams at once:
  hits, resubmissions, prompt tokens prefilled again per resubmission, steps per hit.

Usage: VLLM_CPU_OMP_THREADS_BIND=nobind .venv-vllm/bin/python bench/vllm.py [--tokens 32] [--reps 2]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# This file is named vllm.py: with its directory first on sys.path (python bench/vllm.py), `import vllm`
# would import it instead of vLLM.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")  # shared cores: see docs/vllm.md
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")

from transformers import AutoTokenizer  # noqa: E402

from guardrail.engines.vllm.driver import DEFAULT_BLOCK_SIZE, VLLMDriver  # noqa: E402
from guardrail.guard.events import Finish  # noqa: E402
from guardrail.params import SamplingParams  # noqa: E402
from guardrail.prompts import prompt_ids  # noqa: E402

PROMPTS = ["Name three fruits.", "Count from one to five.", "What is two plus two?",
           "Describe a cat in one sentence.", "Name a large ocean.", "What is the color of grass?",
           "List three musical instruments.", "What do bees make?"]
LEAKS = json.loads((Path(__file__).parent.parent / "tests" / "data" / "leak_prompts.json").read_text("utf-8"))
CONTEXTS = (128, 512, 2000)


def run_streams(driver: VLLMDriver, prompts: list[list[int]], **kwargs) -> tuple[float, list[Finish]]:
    """Stream every prompt at once; return (aggregate tokens/s, the Finish events)."""
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=len(prompts)) as pool:
        finishes = list(pool.map(lambda ids: driver.generate(ids, **kwargs), prompts))
    seconds = time.perf_counter() - started
    return sum(f.usage.completion_tokens for f in finishes) / seconds, finishes


def throughput(driver: VLLMDriver, chats: list[list[int]], tokens: int, reps: int) -> dict:
    params = SamplingParams(temperature=0, max_tokens=tokens)
    result = {}
    for streams in (1, 8):
        prompts = chats[:streams]
        runs: dict[str, list[float]] = {"guarded": [], "unguarded": []}
        hits = 0
        for rep in range(reps):
            order = ("unguarded", "guarded") if rep % 2 == 0 else ("guarded", "unguarded")  # no order bias
            for name in order:
                lists = ["en"] if name == "guarded" else []
                rate, finishes = run_streams(driver, prompts, params=params, wordlists=lists)
                runs[name].append(rate)
                hits += sum(f.usage.rollbacks for f in finishes)
        guarded, unguarded = statistics.median(runs["guarded"]), statistics.median(runs["unguarded"])
        result[f"streams_{streams}"] = {
            "guarded_tokens_per_s": round(guarded, 2), "unguarded_tokens_per_s": round(unguarded, 2),
            "guarded_over_unguarded": round(guarded / unguarded, 3), "hits": hits,
        }
    return result


def embedded(chats: list[list[int]], tokens: int, vocab) -> dict:
    from guardrail.engines.transformers.decoder import StreamingDecoder
    from guardrail.matching.cache import ArtefactCache
    from guardrail.models import cache_dir, load_model
    from guardrail.wordlists.selection import select_wordlists

    decoder = StreamingDecoder(load_model("smollm2"), None, vocab)
    artefact = ArtefactCache(cache_dir=cache_dir()).get(vocab, select_wordlists(["en"]))[0]
    params = SamplingParams(temperature=0, max_tokens=tokens)
    rates = {}
    for name, guard in (("unguarded", None), ("guarded", artefact)):
        produced, started = 0, time.perf_counter()
        for ids in chats[:2]:
            produced += list(decoder.stream(ids, guard, params))[-1].usage.completion_tokens
        rates[f"{name}_tokens_per_s"] = round(produced / (time.perf_counter() - started), 2)
    return rates


def rollback(driver: VLLMDriver, vocab_size: int) -> dict:
    rng = random.Random(0)
    params = SamplingParams(temperature=0, max_tokens=1)
    result = {}
    for context in CONTEXTS:
        prompt = [rng.randrange(1000, vocab_size) for _ in range(context)]
        first = driver.generate(prompt, params=params)  # fills the prefix cache, like the aborted request
        started = time.perf_counter()
        resubmitted = driver.generate(prompt + list(first.token_ids), params=params)
        cached_s = time.perf_counter() - started
        fresh = [rng.randrange(1000, vocab_size) for _ in range(context + 1)]
        started = time.perf_counter()
        driver.generate(fresh, params=params)
        full_s = time.perf_counter() - started
        result[f"context_{context}"] = {
            "resubmission_s": round(cached_s, 4), "full_prefill_s": round(full_s, 4),
            "full_over_resubmission": round(full_s / cached_s, 1),
            "cached_tokens": resubmitted.usage.cached_tokens, "prefill_tokens": resubmitted.usage.prefill_tokens,
        }
    return result


def leak_suite(driver: VLLMDriver, chat) -> dict:
    terms = sorted({case["term"] for case in LEAKS})
    prompts = [chat(case["prompt"]) for case in LEAKS]
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=len(prompts)) as pool:
        finishes = list(pool.map(lambda pair: driver.generate(pair[1], banned_terms=terms, params=SamplingParams(
            temperature=0, max_tokens=pair[0]["tokens_to_term"] + 6)), zip(LEAKS, prompts)))
    seconds = time.perf_counter() - started
    hits = sum(f.usage.rollbacks for f in finishes)
    resubmissions = sum(f.usage.resubmissions for f in finishes)
    resubmitted_prefill = sum(f.usage.prefill_tokens - f.usage.prompt_tokens for f in finishes)
    return {
        "prompts": len(LEAKS), "hits": hits, "resubmissions": resubmissions,
        "resubmissions_per_hit": round(resubmissions / max(hits, 1), 3),
        "prefill_tokens_per_resubmission": round(resubmitted_prefill / max(resubmissions, 1), 1),
        "steps_per_hit": round(sum(f.usage.forward_passes for f in finishes) / max(hits, 1), 2),
        "content_filter": sum(f.reason == "content_filter" for f in finishes), "seconds": round(seconds, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--no-embedded", action="store_true")
    args = parser.parse_args()

    started = time.perf_counter()
    driver = VLLMDriver.load("smollm2", max_model_len=4096, enforce_eager=True)
    startup = time.perf_counter() - started
    tokenizer = AutoTokenizer.from_pretrained(driver.engine.model_config.tokenizer)

    def chat(text: str) -> list[int]:
        return prompt_ids(tokenizer, messages=[{"role": "user", "content": text}])

    chats = [chat(p) for p in PROMPTS]
    driver.generate(chats[0], wordlists=["en"], params=SamplingParams(max_tokens=2))  # compile/load `en` once
    report = {
        "engine": {"vllm_startup_s": round(startup, 1), "block_size": DEFAULT_BLOCK_SIZE, "dtype": "float32",
                   "enforce_eager": True, "tokens_per_stream": args.tokens, "reps": args.reps},
        "throughput": throughput(driver, chats, args.tokens, args.reps),
        "rollback": rollback(driver, driver.num_logits),
        "leak_suite": leak_suite(driver, chat),
    }
    if not args.no_embedded:
        report["embedded"] = embedded(chats, args.tokens, driver.vocab)
    driver.close()
    print(json.dumps(report))


if __name__ == "__main__":
    main()
