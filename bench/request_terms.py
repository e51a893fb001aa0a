"""Request-terms benchmark: what a request's own 10 terms add before its first token, on both vocabs.

Prints one JSON object. Floor (issue 8): with 10 fresh request terms, the guard's first-token work
(artefact for the request's lists + a matcher + the first step + the always-banned ids) is at most 10 ms
slower than with no request terms on Gemma 3's vocab (``added_first_token_ms``: median of the paired
differences, the no-terms path measured just before each request-terms run). Baselines in the same run:
the no-terms path itself, and the previous design (the stored lists recompiled with the request's terms
over the whole vocab, ``joint_compile_seconds``). The per-vocab token-text index is built once per process
and not counted against a request; its cost is reported (``index_build_seconds``).

Also per vocab, the mask primitive (``Artefact.completing_tokens``) on new states reached by random
glued term fragments, memo cold: ``mask_ms_per_new_state`` (median, p90, max), and a memo hit.

Regex terms: ``regex_added_first_token_ms`` is the same paired difference with 4 fresh regex terms per
request (``re:<term>[0o]{1,2}<n>``: never seen, so no automaton LRU hit), and ``regex_mask`` the mask
primitive on new states of ``en`` plus regex variants of 20 of its terms.

``--service``: the same comparison through the real service on SmolLM2 (its own process, embedded store,
default list ``en``): non-streaming chat completions with ``max_tokens=1``, with 10 fresh
``banned_terms`` or none, alternating; median of the paired differences.

Usage: python bench/request_terms.py [--pairs 30] [--service] [--service-pairs 8]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import re
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

from guardrail.matching.artefact import Artefact  # noqa: E402
from guardrail.matching.cache import ArtefactCache  # noqa: E402
from guardrail.matching.compiler import compile_artefact  # noqa: E402
from guardrail.matching.token_matcher import TokenMatcher  # noqa: E402
from guardrail.matching.token_text import TokenTextIndex  # noqa: E402
from guardrail.matching.vocab import TokenVocab  # noqa: E402
from guardrail.models import load_tokenizer  # noqa: E402
from guardrail.wordlists.wordlist import bundled_names, bundled_wordlist, wordlist_from_terms  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TERMS_PER_REQUEST = 10


def fresh_terms(rng: random.Random, pool: list[str]) -> list[str]:
    """10 terms never seen before in this process: a real term from another language's list plus a
    random suffix, so that no memo or cache can have them."""
    return [f"{rng.choice(pool)}{rng.randrange(10**6)}" for _ in range(TERMS_PER_REQUEST)]


def fresh_regexes(rng: random.Random, pool: list[str]) -> list[str]:
    """4 regex terms never seen before in this process (a spelling-variant class in each)."""
    return [f"re:{re.escape(rng.choice(pool)[:8])}[0o]{{1,2}}{rng.randrange(10**6)}" for _ in range(4)]


def term_pool() -> list[str]:
    return [t.text for name in bundled_names() if name != "en" for t in bundled_wordlist(name).terms
            if t.text.strip()]


def first_token_work(cache: ArtefactCache, vocab: TokenVocab, stored, request, first_token: int) -> float:
    """Seconds of the guard's work before the first token: artefact, matcher, first step, always-banned ids."""
    started = time.perf_counter()
    artefact = cache.get_with_request(vocab, stored, request)
    matcher = TokenMatcher(artefact)
    matcher.push(first_token)
    np.asarray(artefact.always_banned, dtype=np.int64)
    return time.perf_counter() - started


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


def mask_costs(vocab: TokenVocab, tokenizer, stored, rng: random.Random, states: int) -> dict:
    """Cost of completing_tokens on new states (memo cold), and on a memo hit (fragments of ``stored[0]``)."""
    base = compile_artefact(vocab, stored)
    artefact = Artefact(vocab, base.terms, base.allows, sweep=base.sweep)  # cold memo, no recompile
    texts = [t.text for t in stored[0].terms]
    costs, sizes, seen = [], [], set()
    while len(costs) < states:
        text = "".join(rng.choice(["", " ", "x"]) + (t := rng.choice(texts))[:rng.randrange(1, len(t) + 1)]
                       for _ in range(2))
        state = 0
        for token in tokenizer.encode(text, add_special_tokens=False):
            state = artefact.transition(state, token).state
        if state in seen:
            continue
        seen.add(state)
        started = time.perf_counter()
        mask = artefact.completing_tokens(state)
        costs.append(time.perf_counter() - started)
        sizes.append(len(mask))
    started = time.perf_counter()
    for state in seen:
        artefact.completing_tokens(state)
    hit = (time.perf_counter() - started) / len(seen)
    return {"states": states, "mask_ms_per_new_state": {"median": round(statistics.median(costs) * 1e3, 2),
                                                        "p90": round(percentile(costs, 90) * 1e3, 2),
                                                        "max": round(max(costs) * 1e3, 2)},
            "mask_size": {"median": int(statistics.median(sizes)), "max": int(max(sizes))},
            "mask_memo_hit_us": round(hit * 1e6, 2)}


def step_cost(vocab: TokenVocab, tokenizer, artefact) -> float:
    """Median µs of a memoised transition (the per-step fast path, lock-free)."""
    text = "Well, I think that you should listen to what they are saying here."
    ids = tokenizer.encode(text, add_special_tokens=False)
    states = [0]
    for token in ids:
        states.append(artefact.transition(states[-1], token).state)
    times = []
    for _ in range(200):
        started = time.perf_counter()
        for state, token in zip(states, ids):
            artefact.transition(state, token)
        times.append((time.perf_counter() - started) / len(ids))
    return round(statistics.median(times) * 1e6, 3)


def bench_vocab(model: str, pairs: int, rng: random.Random, pool: list[str]) -> dict:
    tokenizer = load_tokenizer(model)
    vocab = TokenVocab.from_tokenizer(tokenizer)
    started = time.perf_counter()
    index = TokenTextIndex.for_vocab(vocab)
    index_seconds = time.perf_counter() - started
    stored = [bundled_wordlist("en")]
    with tempfile.TemporaryDirectory() as workdir:
        cache = ArtefactCache(None, workdir)
        cache.get(vocab, stored)  # the stored lists' artefact is compiled at start-up, as in the service
        first_token = tokenizer.encode("Hello", add_special_tokens=False)[0]
        none, terms, added = [], [], []
        for _ in range(pairs):
            request = [wordlist_from_terms(fresh_terms(rng, pool))]
            a = first_token_work(cache, vocab, stored, [], first_token)
            b = first_token_work(cache, vocab, stored, request, first_token)
            none.append(a)
            terms.append(b)
            added.append(b - a)
        regex_added = []
        for _ in range(pairs):
            request = [wordlist_from_terms(fresh_regexes(rng, pool))]
            a = first_token_work(cache, vocab, stored, [], first_token)
            b = first_token_work(cache, vocab, stored, request, first_token)
            regex_added.append(b - a)
        files = list(Path(workdir, "artefacts").glob("*.bin"))
        request = [wordlist_from_terms(fresh_terms(rng, pool))]
        started = time.perf_counter()
        compile_artefact(vocab, stored + request)
        joint = time.perf_counter() - started
        combined = cache.get_with_request(vocab, stored, request)
    return {
        "vocab_size": len(vocab),
        "index_build_seconds": round(index_seconds, 3),
        "index_build_seconds_in_index": round(index.build_seconds, 3),
        "no_terms_first_token_ms": round(statistics.median(none) * 1e3, 3),
        "request_terms_first_token_ms": round(statistics.median(terms) * 1e3, 3),
        "added_first_token_ms": round(statistics.median(added) * 1e3, 3),
        "added_first_token_ms_p90": round(percentile(added, 90) * 1e3, 3),
        "joint_compile_seconds": round(joint, 3),
        "joint_compile_vs_added": round(joint / max(statistics.median(added), 1e-9), 1),
        "artefact_files_written": len(files),  # request terms never reach the disk: stays 1 (the stored list)
        "step_memo_hit_us": {"stored": step_cost(vocab, tokenizer, cache.get(vocab, stored)[0]),
                             "combined": step_cost(vocab, tokenizer, combined)},
        "regex_added_first_token_ms": round(statistics.median(regex_added) * 1e3, 3),
        "regex_added_first_token_ms_p90": round(percentile(regex_added, 90) * 1e3, 3),
        **mask_costs(vocab, tokenizer, stored, rng, 40),
        "regex_mask": mask_costs(vocab, tokenizer, [bundled_wordlist("en"), wordlist_from_terms(
            [f"re:{re.escape(t.text[0])}.{re.escape(t.text[2:])}" for t in bundled_wordlist("en").terms[:20]
             if len(t.text) > 3])], rng, 20),
    }


def bench_service(pairs: int, rng: random.Random, pool: list[str]) -> dict:
    import httpx

    spec = importlib.util.spec_from_file_location("bench_service", ROOT / "bench" / "service.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with tempfile.TemporaryDirectory() as data_dir:
        process, base = module.start_service(data_dir)
        try:
            with httpx.Client(timeout=120) as client:
                def ask(banned: list[str]) -> float:
                    body = {"model": module.MODEL, "messages": [{"role": "user", "content": "Say hello."}],
                            "temperature": 0, "max_tokens": 1}
                    if banned:
                        body["banned_terms"] = banned
                    started = time.perf_counter()
                    response = client.post(f"{base}/v1/chat/completions", json=body)
                    response.raise_for_status()
                    return time.perf_counter() - started

                for _ in range(3):  # warm up: the stored artefact, the token-text index, the model
                    ask([])
                    ask(fresh_terms(rng, pool))
                none, terms = [], []
                for _ in range(pairs):
                    none.append(ask([]))
                    terms.append(ask(fresh_terms(rng, pool)))
        finally:
            process.terminate()
            process.wait(30)
    added = [b - a for a, b in zip(none, terms)]
    return {"pairs": pairs, "no_terms_ms": round(statistics.median(none) * 1e3, 2),
            "request_terms_ms": round(statistics.median(terms) * 1e3, 2),
            "added_ms_median_of_pairs": round(statistics.median(added) * 1e3, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=30)
    parser.add_argument("--service", action="store_true", help="also measure through the real service (SmolLM2)")
    parser.add_argument("--service-pairs", type=int, default=8)
    args = parser.parse_args()
    rng = random.Random(8)
    pool = term_pool()
    out: dict = {"benchmark": "request_terms", "terms_per_request": TERMS_PER_REQUEST, "cases": {}}
    for model in ("smollm2", "gemma3"):
        out["cases"][model] = bench_vocab(model, args.pairs, rng, pool)
    if args.service:
        out["service_smollm2"] = bench_service(args.service_pairs, rng, pool)
    out["floors"] = {"gemma3_added_first_token_le_10ms": out["cases"]["gemma3"]["added_first_token_ms"] <= 10.0}
    if args.service:
        out["floors"]["service_smollm2_added_le_10ms"] = out["service_smollm2"]["added_ms_median_of_pairs"] <= 10.0
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
