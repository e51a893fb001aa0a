"""Decode benchmark: what the guard costs per token, what a rollback costs, and what a banned hit costs.

Prints one JSON object. Every number comes with its baseline measured in the same run (the machine is
shared and noisy, so ratios are what to compare):

* ``overhead``: tokens/s of guarded (bundled ``en`` list) vs unguarded decoding in the same loop
  (``StreamingDecoder`` with ``artefact=None``) on SmolLM2 prompts that hit nothing, the two generations
  advanced step by step in turn (floor: guarded ≥ 0.97 × unguarded); and a guarded generation alone vs
  ``model.generate`` with the same settings, run one after the other (noisier: not interleaved).
* ``guard_step_us``: the guard's work per step — the mask of ``GuardSession.mask_ids()``,
  ``GuardSession.accept`` (matcher push, release bookkeeping), dropping unreachable logits — replayed on the
  tokens of those generations through the public session API (the model's forward pass replaced by stored
  logits). Floor: p50 ≤ 50 µs.
* ``rollback``: rolling back a 4-token term at 128 / 512 / 2048 tokens of context, by cache crop vs by
  re-prefill. Floors: crop@2048 ≤ 2 × crop@128; re-prefill@2048 ≥ 10 × crop@2048.
* ``leak_suite``: guarded greedy decoding of ``tests/data/leak_prompts.json`` (all targets banned):
  hits, forward passes spent per hit and per term token (the target's tokens, once per position rolled
  back to), re-prefills, glued evasions (a target of 4+ characters hidden in a longer run: "thankyou").
* ``leak_suite_without_retry_bans``: the same suite banning only the term's first token after a rollback,
  the baseline for ``retry_bans_passes_per_hit_ratio`` (what the retry policy saves).
* ``evasion``: the evasion guard on the leak suite, greedy and at temperature 1.0 over seeds 0-2, each run
  with the guard ``off``, ``substring`` and ``edit``: leaks (must be 0), visible evasions by kind (the glued,
  underscore-joined and one-edit forms of a banned term after the generation's first rollback, found by
  :func:`guardrail.matching.evasion_forms.find_evasions`), prompts with one, ``content_filter`` stops,
  forward passes per hit, escalations, evasions caught, and output length with vs without the guard.
  Floors (each mode): per run, at most 1 prompt in 29 with a visible evasion and at most 2 ``content_filter``
  stops.

Usage: python bench/decode.py [--tokens 32] [--reps 2] [--gemma] [--evasion-tokens 32] [--evasion-seeds 0,1,2]
                              [--only evasion]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Measure this checkout's guardrail, not the one installed in the venv (a worktree's bench would time main).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from guardrail.engines.transformers.decoder import StreamingDecoder, generation_eos_ids  # noqa: E402
from guardrail.engines.transformers.kv_cache import KVCache  # noqa: E402
from guardrail.engines.transformers.sampling import BanMask  # noqa: E402
from guardrail.guard.events import Finish, Rollback, TextDelta  # noqa: E402
from guardrail.guard.session import KEEP  # noqa: E402
from guardrail.matching.compiler import compile_artefact  # noqa: E402
from guardrail.matching.evasion_forms import find_evasions  # noqa: E402
from guardrail.matching.obfuscation import OFF  # the artefacts here compile the lists as they are
from guardrail.matching.term_spec import flatten  # noqa: E402
from guardrail.matching.textmatch import TextMatcher  # noqa: E402
from guardrail.matching.vocab import TokenVocab  # noqa: E402
from guardrail.models import load_model, load_tokenizer  # noqa: E402
from guardrail.params import SamplingParams  # noqa: E402
from guardrail.prompts import prompt_ids  # noqa: E402
from guardrail.wordlists.wordlist import bundled_wordlist, wordlist_from_terms  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
NO_HIT_PROMPTS = [
    "Describe a sunny day at the beach.",
    "Explain how a bicycle works.",
    "Give me three tips for learning to cook.",
    "Describe the water cycle.",
    "What should I pack for a weekend hiking trip?",
]
CONTEXTS = (128, 512, 2048)
TERM_TOKENS = 4


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def run(decoder, ids, artefact, params):
    started = time.perf_counter()
    events = list(decoder.stream(ids, artefact, params))
    return events, time.perf_counter() - started


# -- guard overhead ------------------------------------------------------------------------------------

def interleaved(streams):
    """Advance several streams one event at a time, round robin; return each one's events and the time
    spent inside its own steps. An event is about one decode step, so load from other processes on a
    shared machine falls on all streams alike."""
    pending = dict(streams)
    events = {name: [] for name in pending}
    spent = dict.fromkeys(pending, 0.0)
    while pending:
        for name in list(pending):
            started = time.perf_counter()
            event = next(pending[name], None)
            spent[name] += time.perf_counter() - started
            if event is None:
                del pending[name]
            else:
                events[name].append(event)
    return events, spent


def bench_overhead(model, decoder, artefact, chats, tokens, reps):
    params = SamplingParams(temperature=0, max_tokens=tokens)
    totals = {"guarded": [0, 0.0], "unguarded": [0, 0.0]}
    replays, hits = [], 0
    generate_tokens, generate_seconds = 0, 0.0
    eos = sorted(decoder.eos_ids)

    def generate(ids):
        nonlocal generate_tokens, generate_seconds
        with torch.inference_mode():
            started = time.perf_counter()
            out = model.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=tokens, eos_token_id=eos,
                                 pad_token_id=eos[0])
            generate_seconds += time.perf_counter() - started
        generate_tokens += out.shape[1] - len(ids)

    solo_tokens, solo_seconds = 0, 0.0

    def guarded_solo(ids):
        nonlocal solo_tokens, solo_seconds
        started = time.perf_counter()
        finish = list(decoder.stream(ids, artefact, params))[-1]
        solo_seconds += time.perf_counter() - started
        solo_tokens += finish.usage.completion_tokens

    for rep in range(reps):
        for index, ids in enumerate(chats):
            # model.generate cannot be stepped, and two interleaved generations share the CPU caches: it is
            # compared with a guarded generation run alone, right before or after it (alternately).
            first, second = (generate, guarded_solo) if (rep + index) % 2 else (guarded_solo, generate)
            first(ids)
            second(ids)
            events, spent = interleaved({"guarded": decoder.stream(ids, artefact, params),
                                         "unguarded": decoder.stream(ids, None, params)})
            for name in totals:
                finish = events[name][-1]
                totals[name][0] += finish.usage.completion_tokens
                totals[name][1] += spent[name]
            hits += events["guarded"][-1].usage.rollbacks
            if rep == 0:
                replays.append((ids, events["guarded"][-1].token_ids))
    guarded = totals["guarded"][0] / totals["guarded"][1]
    unguarded = totals["unguarded"][0] / totals["unguarded"][1]
    generate = generate_tokens / generate_seconds
    return {
        "runs_per_mode": reps * len(chats),
        "tokens_per_run": tokens,
        "hits": hits,
        "guarded_tokens_per_s": round(guarded, 2),
        "unguarded_tokens_per_s": round(unguarded, 2),
        "guarded_over_unguarded": round(guarded / unguarded, 4),
        "generate_tokens_per_s": round(generate, 2),
        "guarded_alone_tokens_per_s": round(solo_tokens / solo_seconds, 2),
        "guarded_alone_over_generate": round(solo_tokens / solo_seconds / generate, 4),
    }, replays


def bench_guard_step(decoder, artefact, replays):
    """Replay generations step by step with stored logits; time what the guard adds to a step: the engine's
    mask of ``session.mask_ids()``, ``session.accept`` (matcher, release) and dropping unreachable logits."""
    raw = torch.randn((1, decoder.model.config.vocab_size))
    samples = {"guarded": [], "unguarded": []}
    held = []  # tokens decoded but not yet released, after each guarded step
    for _ in range(3):
        for ids, tokens in replays:
            for name, guard in (("guarded", artefact), ("unguarded", None)):
                session = decoder.session(guard, SamplingParams(temperature=0, max_tokens=len(tokens) + 1), len(ids))
                mask = BanMask()
                logits = {}
                for token in tokens:
                    logits[session.position] = scores = raw.clone()  # stands in for the forward pass (not timed)
                    started = time.perf_counter()
                    with torch.inference_mode():
                        mask.apply(scores, session.mask_ids())
                    if session.accept(token).kind != KEEP:
                        raise RuntimeError("replayed token hit a term")
                    for old in [p for p in logits if p < session.frontier]:
                        del logits[old]
                    samples[name].append(time.perf_counter() - started)
                    if guard is not None:
                        held.append(session.held_back)
    guarded = [s * 1e6 for s in samples["guarded"]]
    unguarded = [s * 1e6 for s in samples["unguarded"]]
    return {
        "steps": len(guarded),
        "p50": round(percentile(guarded, 50), 2),
        "p99": round(percentile(guarded, 99), 2),
        "unguarded_bookkeeping_p50": round(percentile(unguarded, 50), 2),
        "guard_only_p50": round(percentile(guarded, 50) - percentile(unguarded, 50), 2),
        "memoised_states": artefact.num_states,
        "held_back_tokens_mean": round(statistics.mean(held), 2),
        "held_back_tokens_max": max(held),
    }


# -- rollback cost -------------------------------------------------------------------------------------

def bench_rollback(model, tokenizer, record_past=True):
    text = (ROOT / "docs" / "interfaces.md").read_text(encoding="utf-8") * 8
    pool = tokenizer.encode(text, add_special_tokens=False)
    out = {}
    for context in CONTEXTS:
        ids = pool[:context + TERM_TOKENS]
        kv = KVCache(model, record_past=record_past)
        kv.forward(ids[:context])
        crops, steps = [], []
        for _ in range(15):
            for token in ids[context:]:
                started = time.perf_counter()
                kv.forward([token])
                steps.append(time.perf_counter() - started)
            started = time.perf_counter()
            rebuilt = kv.rollback_to(context, ids)
            crops.append(time.perf_counter() - started)
            assert not rebuilt, "crop path re-prefilled"
        reprefills = []
        for _ in range(2 if context >= 2048 else 3):
            started = time.perf_counter()
            kv.reprefill(ids[:context])
            reprefills.append(time.perf_counter() - started)
        out[str(context)] = {
            "crop_us": round(statistics.median(crops) * 1e6, 1),
            "reprefill_ms": round(statistics.median(reprefills) * 1e3, 1),
            "decode_step_ms": round(statistics.median(steps) * 1e3, 2),
        }
    crop_128, crop_2048 = out["128"]["crop_us"], out["2048"]["crop_us"]
    out["crop_2048_over_crop_128"] = round(crop_2048 / crop_128, 3)
    out["reprefill_2048_over_crop_2048"] = round(out["2048"]["reprefill_ms"] * 1e3 / crop_2048, 1)
    return out


# -- leak suite ----------------------------------------------------------------------------------------

def squash(text):
    return re.sub(r"[\W_]+", "", text.casefold())


#: Shorter terms hide inside innocent words ("no" in "not"): only longer ones are counted as glued.
GLUE_MIN_CHARS = 4


def bench_leaks(decoder, tokenizer, max_tokens):
    cases = json.loads((ROOT / "tests" / "data" / "leak_prompts.json").read_text(encoding="utf-8"))
    lists = [wordlist_from_terms(sorted({c["term"] for c in cases}), name="targets")]
    artefact = compile_artefact(decoder.vocab, lists)
    matcher = TextMatcher(lists, obfuscation=OFF)
    hits = wasted = reprefills = leaks = occurrences = term_tokens = 0
    finish_reasons: dict[str, int] = {}
    glued = []
    seconds = 0.0
    for case in cases:
        ids = prompt_ids(tokenizer, messages=[{"role": "user", "content": case["prompt"]}])
        events, took = run(decoder, ids, artefact, SamplingParams(temperature=0, max_tokens=max_tokens))
        seconds += took
        finish: Finish = events[-1]
        rollbacks = [e for e in events if isinstance(e, Rollback)]
        hits += len(rollbacks)
        wasted += sum(r.tokens_discarded for r in rollbacks)
        # One occurrence per position the decoder went back to (a term and its retries there).
        here = len({r.position for r in rollbacks})
        occurrences += here
        term_tokens += here * len(tokenizer.encode(" " + case["term"], add_special_tokens=False))
        reprefills += finish.usage.reprefills
        leaks += bool(matcher.scan(finish.text))
        finish_reasons[finish.reason] = finish_reasons.get(finish.reason, 0) + 1
        term = squash(case["term"])
        if len(term) >= GLUE_MIN_CHARS and term in squash(finish.text):  # "sorryfor", "Thankyou"
            glued.append({"term": case["term"], "text": finish.text[:120]})
    return {
        "prompts": len(cases),
        "max_tokens": max_tokens,
        "leaks": leaks,
        "hits": hits,
        "term_occurrences": occurrences,
        "forward_passes_spent_on_hits": wasted,
        "forward_passes_per_hit": round(wasted / max(hits, 1), 3),
        "forward_passes_per_term_token": round(wasted / max(term_tokens, 1), 3),
        "reprefills": reprefills,
        "glued_evasions": len(glued),
        "glued_examples": glued[:5],
        "finish_reasons": finish_reasons,
        "seconds": round(seconds, 1),
    }


# -- evasion guard -------------------------------------------------------------------------------------

#: The sampled runs of the evasion rows (temperature 1.0); greedy runs too.
EVASION_SEEDS = (0, 1, 2)
#: The evasion guard's modes compared ("off" first: the baseline).
EVASION_MODES = ("off", "substring", "edit")


def _empty_row():
    return {"leaks": 0, "visible_evasions": 0, "prompts_with_visible_evasions": 0,
            "by_kind": {"glued": 0, "underscore": 0, "edit": 0}, "content_filter": 0, "hits": 0,
            "forward_passes_spent_on_hits": 0, "escalations": 0, "evasions_caught": 0, "completion_tokens": 0,
            "chars": 0, "examples": []}


def _count(row, events, matcher, vocab, specs):
    """Add one generation's counters to ``row``."""
    finish: Finish = events[-1]
    streamed = ""
    for event in events[:-1]:
        if isinstance(event, TextDelta):
            streamed += event.text
            row["leaks"] += bool(matcher.scan(streamed))
    row["leaks"] += bool(matcher.scan(finish.text))
    rollbacks = [e for e in events if isinstance(e, Rollback)]
    row["hits"] += len(rollbacks)
    row["forward_passes_spent_on_hits"] += sum(r.tokens_discarded for r in rollbacks)
    row["escalations"] += sum(r.escalated for r in rollbacks)
    row["evasions_caught"] += sum(r.evasion for r in rollbacks)
    row["content_filter"] += finish.reason == "content_filter"
    row["completion_tokens"] += finish.usage.completion_tokens
    row["chars"] += len(finish.text)
    forms = visible_evasions(finish, rollbacks, vocab, specs)
    row["visible_evasions"] += len(forms)
    row["prompts_with_visible_evasions"] += bool(forms)
    for form in forms:
        row["by_kind"][form.kind] += 1
        row["examples"].append(f"{form.kind}: {form.text} [{form.term}]")


def visible_evasions(finish, rollbacks, vocab, specs):
    """The evasion forms in the answer after its first rollback (text before it was never refused anything).

    The first rollback position ``p`` bounds every later rollback, so the first ``p`` kept tokens never change
    after it: their decoded length is where the text the decoder was refused in begins."""
    if not rollbacks:
        return []
    first = min(r.position for r in rollbacks)
    offset = len(b"".join(vocab.token_bytes[t] for t in finish.token_ids[:first]).decode("utf-8", "replace"))
    # One per place in the text: "SOORY" is a form of each of the suite's "sorry", "Sorry" and "SORRY".
    forms = {(f.start, f.end): f for f in find_evasions(finish.text, specs) if f.end > offset}
    return list(forms.values())


def bench_evasions(decoder, tokenizer, max_tokens, seeds=EVASION_SEEDS):
    """The leak suite (every target banned at once) with the evasion guard off and on, greedy and at
    temperature 1.0 for each of ``seeds`` (see the module docstring).

    A generation with no rollback with the guard off is the same with it on (nothing escalates before a
    rollback, and the picks are the same: ``tests/engines/transformers/test_decoder_evasion.py`` checks it), so
    it is decoded once and counted for both modes."""
    cases = json.loads((ROOT / "tests" / "data" / "leak_prompts.json").read_text(encoding="utf-8"))
    lists = [wordlist_from_terms(sorted({c["term"] for c in cases}), name="targets")]
    specs, _ = flatten(lists)
    artefact = compile_artefact(decoder.vocab, lists)
    matcher = TextMatcher(lists, obfuscation=OFF)
    chats = [prompt_ids(tokenizer, messages=[{"role": "user", "content": c["prompt"]}]) for c in cases]
    out = {"prompts": len(cases), "max_tokens": max_tokens}
    names = []
    for seed in (None, *seeds):
        name = "greedy" if seed is None else f"seed{seed}"
        names.append(name)
        rows = {mode: _empty_row() for mode in EVASION_MODES}
        started = time.perf_counter()
        for ids in chats:
            base = SamplingParams(temperature=0 if seed is None else 1.0, seed=seed, max_tokens=max_tokens)
            off = list(decoder.stream(ids, artefact, replace(base, evasion_guard="off")))
            hit = any(isinstance(e, Rollback) for e in off)
            _count(rows["off"], off, matcher, decoder.vocab, specs)
            for mode in EVASION_MODES[1:]:
                on = list(decoder.stream(ids, artefact, replace(base, evasion_guard=mode))) if hit else off
                _count(rows[mode], on, matcher, decoder.vocab, specs)
        for row in rows.values():
            row["forward_passes_per_hit"] = round(row["forward_passes_spent_on_hits"] / max(row["hits"], 1), 3)
        out[name] = {
            **rows,
            **{f"{mode}_over_off": {key: round(rows[mode][key] / max(rows["off"][key], 1), 3)
                                    for key in ("completion_tokens", "chars")} for mode in EVASION_MODES[1:]},
            "seconds": round(time.perf_counter() - started, 1),
        }
    per_29 = -(-len(cases) // 29)  # the floors are per 29 prompts: 1 block of 29 for the 28-prompt suite
    out["floors"] = {"leaks==0": all(out[name][mode]["leaks"] == 0 for name in names for mode in EVASION_MODES)}
    for mode in EVASION_MODES[1:]:
        runs = [out[name][mode] for name in names]
        out["floors"][f"{mode}_visible_evasions<=1_per_29_prompts"] = all(
            r["prompts_with_visible_evasions"] <= per_29 for r in runs)
        out["floors"][f"{mode}_content_filter<=2_per_29_prompts"] = all(r["content_filter"] <= 2 * per_29 for r in runs)
    out["evasion_cases"] = bench_evasion_cases(decoder, tokenizer)
    return out


def bench_evasion_cases(decoder, tokenizer):
    """``tests/data/evasion_prompts.json`` (each prompt with its own term banned): the forms with the guard
    off and on."""
    cases = json.loads((ROOT / "tests" / "data" / "evasion_prompts.json").read_text(encoding="utf-8"))
    out = []
    for case in cases:
        lists = [wordlist_from_terms([case["term"]], name="targets")]
        specs, _ = flatten(lists)
        artefact = compile_artefact(decoder.vocab, lists)
        ids = prompt_ids(tokenizer, messages=[{"role": "user", "content": case["prompt"]}])
        row = {"kind": case["kind"], "term": case["term"], "seed": case["seed"]}
        for mode in EVASION_MODES:
            params = SamplingParams(temperature=0 if case["seed"] is None else 1.0, seed=case["seed"],
                                    max_tokens=case["max_tokens"], evasion_guard=mode)
            events = list(decoder.stream(ids, artefact, params))
            rollbacks = [e for e in events if isinstance(e, Rollback)]
            forms = visible_evasions(events[-1], rollbacks, decoder.vocab, specs)
            row[mode] = {"forms": [f"{f.kind}: {f.text}" for f in forms], "finish_reason": events[-1].reason,
                         "text": events[-1].text[:100]}
        out.append(row)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=32, help="tokens per no-hit generation")
    parser.add_argument("--reps", type=int, default=2, help="repetitions of the no-hit prompts")
    parser.add_argument("--leak-tokens", type=int, default=32, help="max_tokens of the leak-suite generations")
    parser.add_argument("--gemma", action="store_true", help="also time rollback on Gemma 3 (sliding window)")
    parser.add_argument("--evasion-tokens", type=int, default=32, help="max_tokens of the evasion-guard runs")
    parser.add_argument("--evasion-seeds", default=",".join(map(str, EVASION_SEEDS)),
                        help="seeds of the sampled evasion-guard runs (comma-separated; greedy always runs)")
    parser.add_argument("--only", choices=("evasion",), default=None, help="run only these rows")
    args = parser.parse_args()
    seeds = tuple(int(seed) for seed in args.evasion_seeds.split(",") if seed.strip())

    tokenizer = load_tokenizer("smollm2")
    model = load_model("smollm2")
    vocab = TokenVocab.from_tokenizer(tokenizer, eos_ids=generation_eos_ids(model))
    decoder = StreamingDecoder(model, tokenizer, vocab)
    artefact = compile_artefact(vocab, [bundled_wordlist("en")])
    chats = [prompt_ids(tokenizer, messages=[{"role": "user", "content": p}]) for p in NO_HIT_PROMPTS]
    run(decoder, chats[0], artefact, SamplingParams(temperature=0, max_tokens=4))  # warm-up
    if args.only == "evasion":
        evasion = bench_evasions(decoder, tokenizer, args.evasion_tokens, seeds)
        print(json.dumps({"model": "smollm2", "evasion": evasion}, ensure_ascii=False))
        return

    overhead, replays = bench_overhead(model, decoder, artefact, chats, args.tokens, args.reps)
    result = {
        "model": "smollm2",
        "torch_threads": torch.get_num_threads(),
        "overhead": overhead,
        "guard_step_us": bench_guard_step(decoder, artefact, replays),
        "rollback": {"smollm2": bench_rollback(model, tokenizer)},
        "leak_suite": bench_leaks(decoder, tokenizer, args.leak_tokens),
    }
    # Ablation: the same suite banning only the term's first token after a rollback (no retry bans).
    plain = StreamingDecoder(model, tokenizer, vocab, retry_bans=False)
    result["leak_suite_without_retry_bans"] = bench_leaks(plain, tokenizer, args.leak_tokens)
    result["retry_bans_passes_per_hit_ratio"] = round(
        result["leak_suite"]["forward_passes_spent_on_hits"]
        / max(result["leak_suite_without_retry_bans"]["forward_passes_spent_on_hits"], 1), 3)
    result["evasion"] = bench_evasions(decoder, tokenizer, args.evasion_tokens, seeds)
    if args.gemma:
        gemma = load_model("gemma3")
        result["rollback"]["gemma3_past_recording"] = bench_rollback(gemma, load_tokenizer("gemma3"))
    rollback = result["rollback"]["smollm2"]
    result["floors"] = {
        "guarded_over_unguarded>=0.97": overhead["guarded_over_unguarded"] >= 0.97,
        "guard_step_p50<=50us": result["guard_step_us"]["p50"] <= 50,
        "crop_2048<=2x_crop_128": rollback["crop_2048_over_crop_128"] <= 2,
        "reprefill_2048>=10x_crop_2048": rollback["reprefill_2048_over_crop_2048"] >= 10,
        "no_leaks": result["leak_suite"]["leaks"] == 0,
        **{f"evasion_{name}": ok for name, ok in result["evasion"]["floors"].items()},
    }
    print(json.dumps(result, ensure_ascii=False))


if __name__ == "__main__":
    main()
