"""Warming an artefact's memo at start-up (guardrail/matching/memo_warmup.py): what it costs and what it saves.

Prints one JSON object. Per vocab (SmolLM2 49,152 tokens, Gemma 3 262,144) and obfuscation level (``off`` and the
default), with the bundled ``en`` list:

* ``warm_up``: :func:`warm_memo` on a freshly compiled artefact, in a fresh process as at the service's start-up
  (the shared obfuscation automata cold too): seconds, tokens pushed, pairs computed, states interned; the
  compile's seconds beside it.
* ``held_out``: text the corpus does not hold, ``docs/design.md`` and ``README.md``, cut into paragraphs and
  tokenized with the model's own tokenizer, pushed paragraph by paragraph through a ``TokenMatcher`` (``push`` and
  ``releasable`` per token, as the guard session; a hit rolled back and its token skipped) on a fresh artefact
  (``fresh``: no warm-up, the baseline) and on a warmed one (``warmed``), each in its own process, runs interleaved:
  the fraction of pushes whose pair was memoised before the push, µs per token (mean, p50, p90), pairs computed;
  over the whole text and over its first 1,000 tokens (``first``: the first answers a process guards).
  ``steady``: the same text once more on the fresh run's artefact (every pair memoised: the floor).
* ``greedy_tokenizer``: the module's greedy tokenizer (a dict bytes -> id tried from the longest token length
  down) against a ``marisa_trie.BinaryTrie`` of the same bytes (longest prefix), build and encode of the corpus
  (the same tokens), and how many of the greedy tokens the model's tokenizer writes too (multiset overlap over the
  model's token count).

Usage: python bench/memo_warmup.py [--reps 3]
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's guardrail, not the venv's

import marisa_trie  # noqa: E402

from guardrail.matching.compiler import compile_artefact  # noqa: E402
from guardrail.matching.memo_warmup import (  # noqa: E402
    CORPUS_PATH,
    GreedyTokenizer,
    ids_by_bytes,
    paragraphs,
    warm_memo,
)
from guardrail.matching.obfuscation import DEFAULT_OBFUSCATION, Obfuscation  # noqa: E402
from guardrail.matching.token_matcher import TokenMatcher  # noqa: E402
from guardrail.matching.vocab import TokenVocab  # noqa: E402
from guardrail.models import load_tokenizer  # noqa: E402
from guardrail.wordlists.wordlist import bundled_wordlist, with_obfuscation  # noqa: E402

VOCABS = ("smollm2", "gemma3")
LEVELS = ("off", str(DEFAULT_OBFUSCATION))
HELD_OUT = ("docs/design.md", "README.md")
#: The held-out tokens also reported apart: about the first four answers of 256 tokens a process guards.
FIRST = 1000


def held_out_ids(tokenizer) -> list[list[int]]:
    text = "\n\n".join((ROOT / path).read_text(encoding="utf-8") for path in HELD_OUT)
    return [tokenizer.encode(chunk, add_special_tokens=False) for chunk in paragraphs(text)]


def replay(artefact, streams: list[list[int]]) -> dict:
    """Push every stream from the text start, timing each token's ``push`` + ``releasable``; the whole text and
    its first :data:`FIRST` tokens (the first answers a process guards)."""
    times, memoised, hits = [], [], 0
    for ids in streams:
        matcher = TokenMatcher(artefact)
        for token_id in ids:
            memoised.append(artefact.memoised(matcher.state, token_id))
            started = time.perf_counter_ns()
            hit = matcher.push(token_id)
            if hit is None:
                matcher.releasable()
            else:
                matcher.rollback_to(hit.start_token)
            times.append(time.perf_counter_ns() - started)
            hits += hit is not None
    return {**summary(times, memoised), "hits": hits, "first": summary(times[:FIRST], memoised[:FIRST])}


def summary(times: list[int], memoised: list[bool]) -> dict:
    ordered = sorted(times)
    return {"tokens": len(times), "memoised_fraction": round(sum(memoised) / len(times), 4),
            "pairs_computed": len(times) - sum(memoised),
            "us_per_token_mean": round(sum(times) / len(times) / 1e3, 2),
            "us_per_token_p50": round(ordered[len(ordered) // 2] / 1e3, 2),
            "us_per_token_p90": round(ordered[int(len(ordered) * 0.9)] / 1e3, 2)}


def one(vocab_name: str, level: str, mode: str) -> dict:
    """One process's measurement (``mode``: fresh or warmed)."""
    tokenizer = load_tokenizer(vocab_name)
    vocab = TokenVocab.from_tokenizer(tokenizer)
    streams = held_out_ids(tokenizer)
    started = time.perf_counter()
    artefact = compile_artefact(vocab, with_obfuscation([bundled_wordlist("en")], Obfuscation.parse(level)))
    result: dict = {"compile_seconds": round(time.perf_counter() - started, 3)}
    if mode == "warmed":
        stats = warm_memo(artefact)
        result["warm_up"] = {"seconds": round(stats.seconds, 3), "tokens": stats.tokens, "pairs": stats.pairs,
                             "hits": stats.hits, "states": artefact.num_states}
    gc.freeze()  # as the service's warm-up ends: no full collection over the vocab's objects inside a timed push
    result["held_out"] = replay(artefact, streams)
    if mode == "fresh":
        result["steady"] = replay(artefact, streams)
    return result


def trie_greedy(trie: marisa_trie.BinaryTrie, ids: dict[bytes, int], longest: int, text: str) -> list[int]:
    """The alternative: at each position, the longest of the trie's keys that prefix the rest."""
    data, position, tokens = text.encode(), 0, []
    while position < len(data):
        found = trie.prefixes(data[position:position + longest])  # shortest first
        if not found:
            position += 1
            continue
        tokens.append(ids[found[-1]])
        position += len(found[-1])
    return tokens


def greedy_costs(reps: int) -> dict:
    corpus = CORPUS_PATH.read_text(encoding="utf-8")
    chunks = paragraphs(corpus)
    out = {}
    for name in VOCABS:
        tokenizer = load_tokenizer(name)
        vocab = TokenVocab.from_tokenizer(tokenizer)
        trie_build, trie_encode, dict_build, dict_encode = [], [], [], []
        for _ in range(reps):
            started = time.perf_counter()
            greedy = GreedyTokenizer(vocab)
            dict_build.append(time.perf_counter() - started)
            started = time.perf_counter()
            ids = [i for chunk in chunks for i in greedy.encode(chunk)]
            dict_encode.append(time.perf_counter() - started)
            started = time.perf_counter()
            table = ids_by_bytes(vocab)  # the same id per bytes as the module's
            trie, longest = marisa_trie.BinaryTrie(table), max(map(len, table))
            trie_build.append(time.perf_counter() - started)
            started = time.perf_counter()
            other = [i for chunk in chunks for i in trie_greedy(trie, table, longest, chunk)]
            trie_encode.append(time.perf_counter() - started)
        assert ids == other, name
        model = tokenizer.encode(corpus, add_special_tokens=False)
        overlap = sum((collections.Counter(ids) & collections.Counter(model)).values())
        out[name] = {"corpus_bytes": len(corpus.encode()), "greedy_tokens": len(ids), "model_tokens": len(model),
                     "shared_with_model": round(overlap / len(model), 4),
                     "trie_build_ms": _ms(trie_build), "trie_encode_ms": _ms(trie_encode),
                     "dict_build_ms": _ms(dict_build), "dict_encode_ms": _ms(dict_encode)}
    return out


def _ms(seconds: list[float]) -> float:
    return round(statistics.median(seconds) * 1e3, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=3, help="processes per vocab, level and mode (medians)")
    parser.add_argument("--one", nargs=3, metavar=("VOCAB", "LEVEL", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(*args.one)))
        return
    runs: dict = collections.defaultdict(list)
    for _ in range(args.reps):
        for name in VOCABS:
            for level in LEVELS:
                for mode in ("fresh", "warmed"):  # interleaved: the machine's load moves both alike
                    done = subprocess.run([sys.executable, __file__, "--one", name, level, mode], check=True,
                                          capture_output=True, text=True)
                    runs[name, level, mode].append(json.loads(done.stdout.splitlines()[-1]))
    result: dict = {"reps": args.reps, "held_out": list(HELD_OUT), "runs": {}}
    for (name, level, mode), found in runs.items():
        result["runs"].setdefault(name, {}).setdefault(level, {})[mode] = _median(found)
    result["greedy_tokenizer"] = greedy_costs(args.reps)
    print(json.dumps(result, indent=2))


def _median(found: list[dict]) -> dict:
    """Per numeric leaf, the median over the runs (counts are the same in every run)."""
    first = found[0]
    if isinstance(first, dict):
        return {key: _median([f[key] for f in found]) for key in first}
    return statistics.median(found)


if __name__ == "__main__":
    main()
