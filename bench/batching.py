"""Continuous-batching benchmark: aggregate tokens/s and TTFT at 1/4/8 streams, rollback inside a batch, guard cost.

Prints one JSON object; every number comes with its baseline measured in the same run (the machine is shared
and noisy: compare ratios):

* ``throughput``: aggregate completion tokens/s of 1, 4 and 8 greedy guarded streams (bundled ``en`` list,
  ``max_tokens`` 48, all submitted at once, distinct prompts) through :class:`BatchedDecoder`, over one
  stream alone through ``StreamingDecoder`` (measured before and after, averaged). Floor: ≥ 4× at 8. The
  engine's prefix cache holds the chat template's system turn (one earlier request, as on a running
  server) and nothing of the measured prompts (cleared before each run); ``batch8_cold`` is the 8-stream
  run with the prefix cache off.
* ``ttft``: time to first released text (submit -> first ``TextDelta``), p50/p99, at 8 streams vs 1 stream
  (the same runs; at 1 stream each of the 8 prompts runs alone, so both are over the same prompts).
* ``rollback_in_batch``: one row of a batch of 8 rolled back by 4 tokens at 128 and 2,048 tokens of context
  (``BatchKVCache.rollback_to``: a mask write; compaction off, measured apart), forward passes added (0),
  and the next batch step's time with that hole vs without.
* ``guard_step_us``: per row and step, the guard's time in the 8-stream run: the row's share of the batch's
  one mask write (``BatchBanMask``), its own mask write when a re-pick needs one, ``GuardSession.accept``
  (matcher, release); guarded rows vs unguarded rows in one batch, the first accept after each forward pass
  apart (it pays for the caches the pass evicted, guarded row or not). Floor: guard only ≤ 4 µs p50 (issue 29).
  ``--guard-only`` runs this part alone (two minutes). The artefact's memo is warmed first, as the service's
  start-up does (``warm_memo``: bundled corpus, none of these prompts); ``--no-warm-up`` measures a fresh memo.

Usage: python bench/batching.py [--tokens 48] [--reps 2]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's guardrail, not the venv's

import torch  # noqa: E402

from guardrail.engines.transformers import batched as batched_module  # noqa: E402
from guardrail.engines.transformers.batch_cache import BatchKVCache, Prefill  # noqa: E402
from guardrail.engines.transformers.batched import BatchedDecoder  # noqa: E402
from guardrail.engines.transformers.decoder import StreamingDecoder, generation_eos_ids  # noqa: E402
from guardrail.engines.transformers.sampling import BanMask, BatchBanMask  # noqa: E402
from guardrail.guard.events import Finish, TextDelta  # noqa: E402
from guardrail.guard.session import GuardSession  # noqa: E402
from guardrail.matching.compiler import compile_artefact  # noqa: E402
from guardrail.matching.memo_warmup import warm_memo  # noqa: E402
from guardrail.matching.vocab import TokenVocab  # noqa: E402
from guardrail.models import load_model, load_tokenizer  # noqa: E402
from guardrail.params import SamplingParams  # noqa: E402
from guardrail.prompts import prompt_ids  # noqa: E402
from guardrail.wordlists.wordlist import bundled_wordlist  # noqa: E402

PROMPTS = [
    "Describe a sunny day at the beach.",
    "Explain how a bicycle works.",
    "Give me three tips for learning to cook.",
    "Describe the water cycle.",
    "What should I pack for a weekend hiking trip?",
    "Write a short poem about autumn leaves.",
    "How do plants make their food?",
    "Explain why the moon has phases.",
]
CONTEXTS = (128, 2048)


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def alone(decoder, chats, artefact, params):
    """One stream at a time: tokens/s and TTFT of each."""
    tokens, seconds, ttft = 0, 0.0, []
    for ids in chats:
        started = time.perf_counter()
        first = None
        for event in decoder.stream(ids, artefact, params):
            if first is None and isinstance(event, TextDelta):
                first = time.perf_counter() - started
            if isinstance(event, Finish):
                tokens += event.usage.completion_tokens
        seconds += time.perf_counter() - started
        ttft.append(first if first is not None else seconds)
    return tokens / seconds, ttft


WARM_UP = [{"role": "user", "content": "Hello!"}]  # not measured: fills the prefix cache with the chat head


def batch(engine, chats, artefact, params, streams, warm_up):
    """``streams`` requests submitted at once; aggregate tokens/s, TTFT per request. One stream: each of the
    8 prompts on its own, one after another (so that TTFT at 1 and at 8 are over the same prompts)."""
    if streams == 1:
        runs = [batch(engine, [ids], artefact, params, "one", warm_up) for ids in chats]
        return statistics.mean(rate for rate, _ in runs), [first for _, firsts in runs for first in firsts]
    streams = len(chats) if streams == "one" else streams
    if engine.prefix_cache is not None:
        engine.prefix_cache.clear()
        if engine.prefix_cache.max_bytes:
            engine.generate([(warm_up, artefact, SamplingParams(temperature=0, max_tokens=1))])
    started = time.perf_counter()
    requests = [engine.submit(ids, artefact, params) for ids in chats[:streams]]
    tokens = 0
    while not engine.idle:
        for _, event in engine.step():
            if isinstance(event, Finish):
                tokens += event.usage.completion_tokens
    seconds = time.perf_counter() - started
    ttft = [(r.first_token_at or r.submitted_at + seconds) - r.submitted_at for r in requests]
    return tokens / seconds, ttft


def bench_throughput(decoder, chats, artefact, tokens, reps, warm_up):
    params = SamplingParams(temperature=0, max_tokens=tokens)
    engine = BatchedDecoder(decoder, max_batch=8)
    cold = BatchedDecoder(decoder, max_batch=8, prefix_cache_bytes=0)
    base_runs, runs = [], {1: [], 4: [], 8: [], "8_cold": []}
    ttft = {1: [], 8: []}
    for _ in range(reps):
        rate, first = alone(decoder, chats[:2], artefact, params)
        base_runs.append(rate)
        for streams in runs:
            size = 8 if streams == "8_cold" else streams
            rate, firsts = batch(cold if streams == "8_cold" else engine, chats, artefact, params, size, warm_up)
            runs[streams].append(rate)
            if streams in ttft:
                ttft[streams] += firsts
        rate, first = alone(decoder, chats[2:4], artefact, params)
        base_runs.append(rate)
    baseline = statistics.mean(base_runs)
    out = {"alone_tokens_per_s": round(baseline, 2), "max_tokens": tokens, "reps": reps}
    for streams, rates in runs.items():
        rate = statistics.mean(rates)
        out[f"batch{streams}_tokens_per_s"] = round(rate, 2)
        out[f"batch{streams}_over_alone"] = round(rate / baseline, 3)
    ttft_out = {}
    for streams, values in ttft.items():
        ttft_out[f"p50_s_at_{streams}"] = round(percentile(values, 50), 3)
        ttft_out[f"p99_s_at_{streams}"] = round(percentile(values, 99), 3)
    ttft_out["p99_8_over_p99_1"] = round(ttft_out["p99_s_at_8"] / ttft_out["p99_s_at_1"], 3)
    ttft_out["prefill_passes"] = engine.prefill_passes
    ttft_out["prefix_cache_hits"] = engine.prefix_cache.hits
    return out, ttft_out


def bench_rollback(model, tokenizer, reps=15):
    text = " ".join(PROMPTS) * 200
    pool = tokenizer.encode(text, add_special_tokens=False)
    out = {}
    for context in CONTEXTS:
        prefill = Prefill(model, [pool[:context]] * 8, chunk=4096)
        while not prefill.done:
            prefill.advance()
        cache = BatchKVCache(model, compact_at=10**9)  # compaction measured apart
        cache.join(list(range(8)), prefill)
        feed = [pool[context]] * 8
        rollbacks, steps_plain, steps_hole = [], [], []
        passes = 0
        for _ in range(reps):
            for _ in range(4):
                started = time.perf_counter()
                cache.forward(feed)
                steps_plain.append(time.perf_counter() - started)
                passes += 1
            before = passes
            started = time.perf_counter()
            cache.rollback_to(3, cache.length(3) - 4)
            rollbacks.append(time.perf_counter() - started)
            assert passes == before
            started = time.perf_counter()
            cache.forward(feed)
            steps_hole.append(time.perf_counter() - started)
            passes += 1
        started = time.perf_counter()
        cache.compact(3)
        compact = time.perf_counter() - started
        out[str(context)] = {
            "rollback_us": round(statistics.median(rollbacks) * 1e6, 1),
            "forward_passes_added": 0,
            "step_ms": round(statistics.median(steps_plain) * 1e3, 2),
            "step_after_rollback_ms": round(statistics.median(steps_hole) * 1e3, 2),
            "compact_ms": round(compact * 1e3, 2),
            "holes_compacted": reps * 4,
        }
    out["rollback_2048_over_128"] = round(out["2048"]["rollback_us"] / out["128"]["rollback_us"], 3)
    return out


def bench_guard_step(decoder, chats, artefact, tokens):
    """The guard's work per row and step inside the 8-stream batch, timed around the calls in the real run:
    the row's share of the batch's one mask write after the pass (``BatchBanMask.apply`` ÷ rows), the row's own
    mask write when its pick needs one (``BanMask.apply``: a re-pick after a rollback), and
    ``GuardSession.accept``; 4 guarded and 4 unguarded rows in one batch (an unguarded row runs the same calls
    with no matcher). ``guard_only_p50``: guarded p50 − unguarded p50.

    The batch runs twice, the even rows guarded and then the odd ones (different prompts guarded each time, so
    the second run's answers are as new to the memo as the first's). The first ``accept`` after each forward
    pass is kept apart (``first_after_pass``): it pays for the caches the pass evicted, whichever row stands
    first, guarded or not (its p50 per kind is reported); with the even rows guarded it would always land on a
    guarded row and count as guard time."""
    samples: dict[str, list[float]] = {"guarded": [], "unguarded": [], "first_guarded": [], "first_unguarded": []}
    apply, batch_apply, accept = BanMask.apply, BatchBanMask.apply, GuardSession.accept
    forward = BatchedDecoder._forward
    masked = {"row": 0.0, "share": 0.0, "first": False}

    def timed_forward(self, cache):
        forward(self, cache)
        masked["first"] = True

    def timed_apply(self, scores, ids):
        started = time.perf_counter()
        apply(self, scores, ids)
        masked["row"] += time.perf_counter() - started

    def timed_batch_apply(self, logits, generations):
        started = time.perf_counter()
        out = batch_apply(self, logits, generations)
        masked["share"] = (time.perf_counter() - started) / max(len(generations), 1)
        return out

    def timed_accept(self, token, logprobs=None):
        started = time.perf_counter()
        step = accept(self, token, logprobs)
        seconds = time.perf_counter() - started + masked["row"] + masked["share"]
        kind = "guarded" if self.artefact is not None else "unguarded"
        samples[f"first_{kind}" if masked["first"] else kind].append(seconds)
        masked["row"], masked["first"] = 0.0, False
        return step

    BanMask.apply, BatchBanMask.apply, GuardSession.accept = timed_apply, timed_batch_apply, timed_accept
    BatchedDecoder._forward = timed_forward
    try:
        # No wall-clock limit: on a loaded machine the default 60 s ends the rows after a few tokens ("length").
        params = SamplingParams(temperature=0, max_tokens=tokens, timeout_s=3600)
        for parity in (0, 1):
            engine = BatchedDecoder(decoder, max_batch=8)
            engine.generate([(ids, artefact if index % 2 == parity else None, params)
                             for index, ids in enumerate(chats[:8])])
    finally:
        BanMask.apply, BatchBanMask.apply, GuardSession.accept = apply, batch_apply, accept
        BatchedDecoder._forward = forward
    us = {kind: [s * 1e6 for s in values] for kind, values in samples.items()}
    return {
        "row_steps": len(us["guarded"]),
        "p50": round(percentile(us["guarded"], 50), 2),
        "p99": round(percentile(us["guarded"], 99), 2),
        "unguarded_row_p50": round(percentile(us["unguarded"], 50), 2),
        "guard_only_p50": round(percentile(us["guarded"], 50) - percentile(us["unguarded"], 50), 2),
        "first_after_pass": {kind: {"count": len(us[f"first_{kind}"]),
                                    "p50": round(percentile(us[f"first_{kind}"], 50), 2)}
                             for kind in ("guarded", "unguarded")},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=48, help="max_tokens per stream")
    parser.add_argument("--reps", type=int, default=2, help="repetitions of the throughput runs")
    parser.add_argument("--guard-only", action="store_true", help="only the guard time per row and step")
    parser.add_argument("--no-warm-up", action="store_true",
                        help="measure on a fresh memo (no start-up warm-up, unlike a served process)")
    args = parser.parse_args()

    tokenizer = load_tokenizer("smollm2")
    model = load_model("smollm2")
    vocab = TokenVocab.from_tokenizer(tokenizer, eos_ids=generation_eos_ids(model))
    decoder = StreamingDecoder(model, tokenizer, vocab)
    artefact = compile_artefact(vocab, [bundled_wordlist("en")])
    # What the service's start-up does before the first request (docs/matching.md, "Warming the memo"): the
    # sweep's root transitions and the bundled prose corpus, none of this bench's prompts or answers.
    warm_up_stats = None if args.no_warm_up else warm_memo(artefact)
    chats = [prompt_ids(tokenizer, messages=[{"role": "user", "content": p}]) for p in PROMPTS]
    list(decoder.stream(chats[0], artefact, SamplingParams(temperature=0, max_tokens=4)))  # warm-up
    warm_up = prompt_ids(tokenizer, messages=WARM_UP)
    if args.guard_only:
        step = bench_guard_step(decoder, chats, artefact, args.tokens)
        print(json.dumps({"model": "smollm2", "memo_warm_up": warm_up_stats and dataclasses.asdict(warm_up_stats),
                          "guard_step_us": step, "floors": {
            "guard_step_p50<=4us": step["guard_only_p50"] <= 4}}))
        return

    throughput, ttft = bench_throughput(decoder, chats, artefact, args.tokens, args.reps, warm_up)
    result = {
        "model": "smollm2",
        "memo_warm_up": warm_up_stats and dataclasses.asdict(warm_up_stats),
        "torch_threads": torch.get_num_threads(),
        "default_max_batch": batched_module.DEFAULT_MAX_BATCH,
        "throughput": throughput,
        "ttft": ttft,
        "rollback_in_batch": bench_rollback(model, tokenizer),
        "guard_step_us": bench_guard_step(decoder, chats, artefact, args.tokens),
    }
    result["floors"] = {
        "batch8>=4x_alone": throughput["batch8_over_alone"] >= 4,
        "ttft_p99_8<=3x_p99_1": ttft["p99_8_over_p99_1"] <= 3,
        "rollback_2048<=2x_rollback_128": result["rollback_in_batch"]["rollback_2048_over_128"] <= 2,
        "guard_step_p50<=4us": result["guard_step_us"]["guard_only_p50"] <= 4,
    }
    print(json.dumps(result, ensure_ascii=False))


if __name__ == "__main__":
    main()
