"""Guarded speculative decoding benchmark: tokens/s with and without drafts, batch 1 and 8, and what they cost.

Prints one JSON object; every ratio has its baseline measured in the same run, interleaved prompt by prompt
(the machine is shared and noisy):

* ``repetitive`` (``tests/data/repetitive_prompts.json``: copy, quote, rewrite a given text) and ``open``
  (the leak suite's open-ended prompts), greedy, bundled ``en`` list, batch 1: ``model.generate`` (no
  guard, no speculation), the guarded decoder without speculation, and with it. Floors: speculative ≥ 1.3×
  ``model.generate`` on ``repetitive`` with the same text as without speculation; ≥ 0.95× on ``open``.
  Also the acceptance rate (accepted ÷ drafted tokens) and completion tokens per decode forward pass.
* ``batch8``: the same prompts (6 repetitive + 2 open) through :class:`BatchedDecoder`, speculation on vs
  off, aggregate tokens/s.
* ``hits``: the leak suite with every target banned (most requests roll back), speculation on vs off: hits,
  decode forward passes in all (on ÷ off: a discarded drafted token costs no pass of its own, so passes per
  discarded token are not comparable), tokens discarded per hit, and the texts equal.
* ``verify_cost``: one forward pass over ``rows`` rows of ``1 + k`` tokens each, ms (what
  ``drafting.VerifyCost`` is fitted to).

Usage: python bench/speculative.py [--tokens 96] [--reps 1]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's guardrail, not the venv's

import torch  # noqa: E402

from guardrail.engines.drafting import SpeculativeConfig  # noqa: E402
from guardrail.engines.transformers.batch_cache import BatchKVCache, Prefill  # noqa: E402
from guardrail.engines.transformers.batched import BatchedDecoder  # noqa: E402
from guardrail.engines.transformers.decoder import StreamingDecoder, generation_eos_ids  # noqa: E402
from guardrail.guard.events import Finish, Rollback  # noqa: E402
from guardrail.matching.compiler import compile_artefact  # noqa: E402
from guardrail.matching.vocab import TokenVocab  # noqa: E402
from guardrail.models import load_model, load_tokenizer  # noqa: E402
from guardrail.params import SamplingParams  # noqa: E402
from guardrail.prompts import prompt_ids  # noqa: E402
from guardrail.wordlists.wordlist import bundled_wordlist, wordlist_from_terms  # noqa: E402

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
OPEN_PROMPTS = 8


def chat(tokenizer, text):
    return prompt_ids(tokenizer, messages=[{"role": "user", "content": text}])


def bench_set(model, decoders, chats, artefact, tokens, reps):
    """Batch 1, prompt by prompt: generate, then the guarded decoder without and with speculation (the order
    rotates per prompt)."""
    eos = sorted(decoders["off"].eos_ids)
    params = SamplingParams(temperature=0, max_tokens=tokens)
    totals = {name: [0, 0.0] for name in ("generate", "off", "on")}
    drafted = accepted = passes = same = 0

    def generate(ids):
        started = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=tokens, eos_token_id=eos,
                                 pad_token_id=eos[0])
        totals["generate"][1] += time.perf_counter() - started
        totals["generate"][0] += out.shape[1] - len(ids)

    def guarded(name):
        def run(ids):
            started = time.perf_counter()
            finish = list(decoders[name].stream(ids, artefact, params))[-1]
            totals[name][1] += time.perf_counter() - started
            totals[name][0] += finish.usage.completion_tokens
            return finish
        return run

    runners = {"generate": generate, "off": guarded("off"), "on": guarded("on")}
    order = ["generate", "off", "on"]
    for rep in range(reps):
        for index, ids in enumerate(chats):
            shift = (rep * len(chats) + index) % 3
            finishes = {}
            for name in order[shift:] + order[:shift]:
                finishes[name] = runners[name](ids)
            on, off = finishes["on"], finishes["off"]
            same += on.text == off.text
            drafted += on.usage.draft_tokens
            accepted += on.usage.accepted_draft_tokens
            passes += on.usage.forward_passes - 1  # the prefill
    rates = {name: tokens_ / seconds for name, (tokens_, seconds) in totals.items()}
    return {
        "runs": reps * len(chats),
        "generate_tokens_per_s": round(rates["generate"], 2),
        "guarded_tokens_per_s": round(rates["off"], 2),
        "speculative_tokens_per_s": round(rates["on"], 2),
        "speculative_over_generate": round(rates["on"] / rates["generate"], 3),
        "speculative_over_guarded": round(rates["on"] / rates["off"], 3),
        "same_text_as_without_speculation": f"{same}/{reps * len(chats)}",
        "acceptance_rate": round(accepted / drafted, 3) if drafted else None,
        "tokens_per_forward_pass": round(totals["on"][0] / passes, 3) if passes else None,
    }


def bench_batch8(decoders, chats, artefact, tokens, reps):
    params = SamplingParams(temperature=0, max_tokens=tokens)
    rates: dict[str, list[float]] = {"off": [], "on": []}
    for rep in range(reps):
        for name in (("off", "on") if rep % 2 == 0 else ("on", "off")):
            engine = BatchedDecoder(decoders[name], max_batch=8)
            started = time.perf_counter()
            events = engine.generate([(ids, artefact, params) for ids in chats])
            seconds = time.perf_counter() - started
            rates[name].append(sum(e[-1].usage.completion_tokens for e in events) / seconds)
    off, on = statistics.mean(rates["off"]), statistics.mean(rates["on"])
    return {"rows": len(chats), "off_tokens_per_s": round(off, 2), "on_tokens_per_s": round(on, 2),
            "on_over_off": round(on / off, 3)}


def bench_hits(decoders, tokenizer, vocab):
    leaks = json.loads((DATA / "leak_prompts.json").read_text(encoding="utf-8"))
    artefact = compile_artefact(vocab, [wordlist_from_terms(sorted({c["term"] for c in leaks}), name="targets")])
    out = {}
    texts = {}
    for name in ("off", "on"):
        hits = passes = discarded = 0
        texts[name] = []
        for case in leaks:
            params = SamplingParams(temperature=0, max_tokens=case["tokens_to_term"] + 6)
            events = list(decoders[name].stream(chat(tokenizer, case["prompt"]), artefact, params))
            finish = events[-1]
            assert isinstance(finish, Finish)
            hits += finish.usage.rollbacks
            passes += finish.usage.forward_passes - 1
            discarded += sum(e.tokens_discarded for e in events if isinstance(e, Rollback))
            texts[name].append(finish.text)
        # Without speculation every discarded token cost one pass (bench/decode.py's passes per hit); with it
        # a discarded drafted token cost none of its own, so compare decode passes in all for the same texts.
        out[name] = {"hits": hits, "decode_passes": passes, "tokens_discarded": discarded,
                     "tokens_discarded_per_hit": round(discarded / max(hits, 1), 3)}
    out["decode_passes_on_over_off"] = round(out["on"]["decode_passes"] / max(out["off"]["decode_passes"], 1), 3)
    out["same_text"] = sum(a == b for a, b in zip(texts["off"], texts["on"], strict=True))
    out["prompts"] = len(leaks)
    return out


def bench_verify_cost(model, reps=7):
    out = {}
    for rows in (1, 8):
        prefill = Prefill(model, [list(range(100, 160))] * rows, chunk=4096)
        prefill.advance()
        cache = BatchKVCache(model, compact_at=10**9)
        cache.join(list(range(rows)), prefill)
        for width in (1, 2, 3, 5):
            times = []
            for _ in range(reps):
                started = time.perf_counter()
                if width == 1:
                    cache.forward([5] * rows)
                else:
                    cache.forward_spans([[5] * width] * rows)
                times.append(time.perf_counter() - started)
            out[f"rows{rows}_tokens{width}_ms"] = round(statistics.median(times) * 1e3, 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=96, help="max_tokens per generation")
    parser.add_argument("--reps", type=int, default=1)
    args = parser.parse_args()

    tokenizer = load_tokenizer("smollm2")
    model = load_model("smollm2")
    vocab = TokenVocab.from_tokenizer(tokenizer, eos_ids=generation_eos_ids(model))
    decoders = {"on": StreamingDecoder(model, tokenizer, vocab),
                "off": StreamingDecoder(model, tokenizer, vocab, speculative=SpeculativeConfig(num_tokens=0))}
    artefact = compile_artefact(vocab, [bundled_wordlist("en")])
    repetitive = [chat(tokenizer, c["prompt"])
                  for c in json.loads((DATA / "repetitive_prompts.json").read_text(encoding="utf-8"))]
    leaks = json.loads((DATA / "leak_prompts.json").read_text(encoding="utf-8"))
    open_ended = [chat(tokenizer, c["prompt"]) for c in leaks[:OPEN_PROMPTS]]
    list(decoders["on"].stream(repetitive[0], artefact, SamplingParams(temperature=0, max_tokens=4)))  # warm-up

    result = {
        "model": "smollm2",
        "torch_threads": torch.get_num_threads(),
        "speculative_tokens": decoders["on"].speculative.num_tokens,
        "repetitive": bench_set(model, decoders, repetitive, artefact, args.tokens, args.reps),
        "open": bench_set(model, decoders, open_ended, artefact, args.tokens // 2, args.reps),
        "batch8": bench_batch8(decoders, repetitive + open_ended[:2], artefact, args.tokens, args.reps),
        "hits": bench_hits(decoders, tokenizer, vocab),
        "verify_cost": bench_verify_cost(model),
    }
    result["floors"] = {
        "repetitive>=1.3x_generate": result["repetitive"]["speculative_over_generate"] >= 1.3,
        "repetitive_same_text": result["repetitive"]["same_text_as_without_speculation"].split("/")[0]
        == str(result["repetitive"]["runs"]),
        "open>=0.95x_generate": result["open"]["speculative_over_generate"] >= 0.95,
    }
    print(json.dumps(result, ensure_ascii=False))


if __name__ == "__main__":
    main()
