"""Compile benchmark: cold and warm (Redis, disk, memory) compiles of bundled lists against both vocabs.

Prints one JSON object. Floors (issue 2, on a 2-core machine): en × Gemma 3 cold ≤ 3 s, warm from
Redis ≤ 0.1 s, all 28 lists × Gemma 3 cold ≤ 10 s. Because the machine is shared and noisy, every
timing also comes as a ratio to a baseline measured in the same run: decoding every token's bytes to
text once (the least any compiler must do).

Usage: python bench/compile.py [--redis-url redis://127.0.0.1:6379/0]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import uuid

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from guardrail.matching.cache import ArtefactCache  # noqa: E402
from guardrail.matching.vocab import TokenVocab  # noqa: E402
from guardrail.models import load_tokenizer  # noqa: E402
from guardrail.redis_client import bounded_client  # noqa: E402
from guardrail.wordlists.wordlist import bundled_names, bundled_wordlist  # noqa: E402


def timed(fn):
    started = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - started


def bench_case(vocab, names, redis_url, prefix, workdir):
    lists = [bundled_wordlist(n) for n in names]
    cold_cache = ArtefactCache(redis_url, workdir, key_prefix=prefix)
    (artefact, layer), cold = timed(lambda: cold_cache.get(vocab, lists))
    assert layer == "compile", layer
    (_, layer), redis_warm = timed(lambda: ArtefactCache(redis_url, None, key_prefix=prefix).get(vocab, lists))
    assert layer == "redis", layer
    (_, layer), disk_warm = timed(lambda: ArtefactCache(None, workdir, key_prefix=prefix).get(vocab, lists))
    assert layer == "disk", layer
    (_, layer), memory_warm = timed(lambda: cold_cache.get(vocab, lists))
    assert layer == "memory", layer
    return {
        "terms": len(artefact.terms),
        "automaton_states": sum(a.num_nodes for a in artefact.automata),
        "always_banned_tokens": int(len(artefact.always_banned)),
        "cold_seconds": round(cold, 4),
        "warm_redis_seconds": round(redis_warm, 4),
        "warm_disk_seconds": round(disk_warm, 4),
        "warm_memory_seconds": round(memory_warm, 6),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-url", default=os.environ.get("GUARDRAIL_REDIS_URL", "redis://127.0.0.1:6379/0"))
    args = parser.parse_args()
    prefix = f"guardrail-bench:{uuid.uuid4().hex}:"
    out: dict = {"benchmark": "compile", "cases": {}}
    try:
        for model in ("smollm2", "gemma3"):
            tokenizer, load = timed(lambda m=model: load_tokenizer(m))
            vocab, vocab_seconds = timed(lambda t=tokenizer: TokenVocab.from_tokenizer(t))
            _, baseline = timed(lambda v=vocab: [b.decode("utf-8", "replace") for b in v.token_bytes])
            out[f"{model}_tokenizer_load_seconds"] = round(load, 3)
            out[f"{model}_vocab_table_seconds"] = round(vocab_seconds, 3)
            out[f"{model}_baseline_decode_vocab_seconds"] = round(baseline, 4)
            cases = [("en", ["en"])] + ([("all28", bundled_names())] if model == "gemma3" else [])
            for label, names in cases:
                with tempfile.TemporaryDirectory() as workdir:
                    result = bench_case(vocab, names, args.redis_url, prefix, workdir)
                result["vocab_size"] = len(vocab.token_bytes)
                result["cold_vs_baseline"] = round(result["cold_seconds"] / baseline, 1)
                out["cases"][f"{label}_x_{model}"] = result
        gemma_en, gemma_all = out["cases"]["en_x_gemma3"], out["cases"]["all28_x_gemma3"]
        out["floors"] = {
            "en_x_gemma3_cold_le_3s": gemma_en["cold_seconds"] <= 3.0,
            "en_x_gemma3_warm_redis_le_100ms": gemma_en["warm_redis_seconds"] <= 0.1,
            "all28_x_gemma3_cold_le_10s": gemma_all["cold_seconds"] <= 10.0,
        }
    finally:
        client = bounded_client(args.redis_url)
        for key in client.scan_iter(prefix + "*"):
            client.delete(key)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
