"""Batch guard benchmark: host time of one guard step at 1 / 64 / 256 rows, SmolLM2 and Gemma 3 vocabs.

Prints one JSON object. Every row is guarded by the bundled ``en`` list (the default obfuscation level) and
decodes tokenized prose: the corpus is Python's own documentation (``pydoc_data.topics``, English prose
shipped with every CPython), tokenized once; row ``r`` reads it from its own offset, one token per step, so
the rows sit in the states prose visits (the memo hit rates are the point: random ids would visit states
prose never does). The memo is warm as on a running server: one request first reads the corpus' first half
(through the processor, and through the batch step's table), and the timed rows read the second half, text
the memo has not seen. Per configuration, after ``--warmup`` steps, ``--steps`` steps are timed, the
measurements below but ``bad_words`` taken in turn on the same step (the order rotates every step), then vLLM's
``bad_words`` apart on the next 12 steps (its ~10^5 Python operations a step at 256 rows evict the caches a
measurement beside it would run in: interleaved, the processor measured ten times slower); each timed with
the cyclic garbage collector off as ``timeit`` does, the heap after the warm-up frozen as vLLM freezes its
own after start-up; p50 and p90 in milliseconds:

* ``processor``: :class:`~guardrail.engines.vllm.logits_processor.GuardLogitsProcessor` built and driven
  through vLLM's public interface (``VllmConfig``, ``BatchUpdate`` with the requests' ``SamplingParams``,
  ``apply(logits)`` on a ``(rows, vocab)`` float32 tensor): advance, index, the ``-inf`` write;
* ``batch_step``: :meth:`BatchGuard.step` alone over the same token lists (its own artefact and memo);
* ``batch_write``: the same step and its write into the logits (:class:`~guardrail.engines.mask_write.MaskWriter`,
  what the processor runs without vLLM's bookkeeping; on a GPU it measures the index copy and the write
  without needing vLLM's CUDA build);
* ``bad_words``: vLLM's own ``bad_words`` on the same batch: the ``en`` terms tokenized as vLLM does
  (``SamplingParams.update_from_tokenizer``, ``VLLM_MAX_NUM_BAD_WORDS`` raised from its default of 128) and
  applied by the sampler's ``apply_bad_words``;
* ``unguarded``: the processor with the same requests sent without ``extra_args["guardrail"]`` (the plugin
  installed and unused: the baseline every engine pays).

``processor_seen_text`` and ``batch_step_seen_text``: the same steps again by new requests, every lookup a
memo hit: the step's own cost, without what the artefact spends on a (state, token) pair or a state it meets
for the first time (measured here: tens of microseconds a pair, milliseconds a new state).

Also per configuration: masked ids written per step (mean), the memo hit rates of the measured steps
(transitions and per-state masks) and the after-the-fact hits (:attr:`MaskRow.missed`: the corpus is fed
as it is, masked or not). Floors (issue 29): ``processor`` p50 ≤ 0.3 ms at 64 rows and ≤ 1.0 ms at 256
rows (SmolLM2), ≤ 1.5 ms at 256 rows (Gemma 3).

Run with the vLLM environment (``processor`` and ``bad_words`` need vLLM; without it they are ``null``)::

    VLLM_CPU_OMP_THREADS_BIND=nobind .venv-vllm/bin/python bench/batch_guard.py [--rows 1,64,256]
        [--vocabs smollm2,gemma3] [--steps 64] [--warmup 16] [--device cpu|cuda]

``--device cuda`` puts the logits on the GPU (``bench/gpu_check.sh``): the times are then host times (the
launch, no synchronisation) beside ``*_synced`` times (``torch.cuda.synchronize`` before the clock stops).

``--throughput 64,256`` (vLLM's CUDA build; ``bench/gpu_check.sh``) instead runs SmolLM2 through vLLM's
``LLM`` with the processor loaded (``logits_processors=``), that many concurrent requests of corpus prose
prompts, greedy, ``ignore_eos`` so every request decodes ``--max-tokens``: aggregate tokens/s guarded (every
request ``extra_args={"guardrail": {"wordlists": ["en"]}}``) over unguarded (the same requests without it),
on one engine, the two runs alternating ``--reps`` times (medians).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path

# bench/vllm.py would shadow vLLM with this directory first on sys.path (python bench/batch_guard.py).
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
# vLLM refuses more than 128 tokenized bad words by default; `en` tokenizes to several hundred sequences.
os.environ.setdefault("VLLM_MAX_NUM_BAD_WORDS", "100000")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's guardrail, not the venv's

import pydoc_data.topics  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from guardrail.engines.mask_write import MaskWriter  # noqa: E402
from guardrail.guard.batch import BatchGuard, MaskRow, MaskTable, always_banned_ids  # noqa: E402
from guardrail.matching.cache import ArtefactCache  # noqa: E402
from guardrail.matching.vocab import TokenVocab  # noqa: E402
from guardrail.models import cache_dir, load_tokenizer, model_directory  # noqa: E402
from guardrail.wordlists.selection import select_wordlists  # noqa: E402
from guardrail.wordlists.wordlist import bundled_wordlist  # noqa: E402

try:
    from vllm import SamplingParams
    from vllm.config import ModelConfig, VllmConfig
    from vllm.tokenizers.registry import cached_tokenizer_from_config
    from vllm.v1.sample.logits_processor import BatchUpdate
    from vllm.v1.sample.ops.bad_words import apply_bad_words

    from guardrail.engines.vllm.logits_processor import GuardLogitsProcessor, load_vocab
except ImportError:  # the main environment: the batch step and its baseline only
    SamplingParams = None

#: Steps timed for vLLM's bad_words (100-400 ms each at 256 rows).
BAD_WORDS_STEPS = 12
FLOORS_MS = {("smollm2", 64): 0.3, ("smollm2", 256): 1.0, ("gemma3", 256): 1.5}
GUARD = {"guardrail": {"wordlists": ["en"]}}


def corpus_ids(tokenizer) -> list[int]:
    """The corpus tokenized once: Python's documentation topics, in a fixed order."""
    text = "\n\n".join(pydoc_data.topics.topics[key] for key in sorted(pydoc_data.topics.topics))
    return tokenizer.encode(text, add_special_tokens=False)


def percentiles(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    return {"p50": round(statistics.median(ordered) * 1e3, 4),
            "p90": round(ordered[int(0.9 * (len(ordered) - 1))] * 1e3, 4)}


class Setup:
    """One vocab: its tokenizer, vocab, end ids, corpus, a processor factory and vLLM's bad_words ids."""

    def __init__(self, name: str, device: torch.device, tokenizer_dir: Path | None = None):
        self.name = name
        self.device = device
        if tokenizer_dir is None:
            self.tokenizer = load_tokenizer(name)
        else:  # a machine without the bundled model packages (bench/gpu_check.sh carries the tokenizers)
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir / name, local_files_only=True)
        self.config = None
        if SamplingParams is not None:
            directory = model_directory(name)  # the processor reads the tokenizer and the width from here
            self.config = VllmConfig(model_config=ModelConfig(model=str(directory)))
            self.vocab, self.eos_ids = load_vocab(str(directory))
            self.num_logits = self.config.model_config.get_vocab_size()
            params = SamplingParams(bad_words=[term.text for term in bundled_wordlist("en").terms])
            params.update_from_tokenizer(cached_tokenizer_from_config(self.config.model_config))
            self.bad_words = params._bad_words_token_ids  # what vLLM's InputBatch hands its sampler
        else:
            self.vocab = TokenVocab.from_tokenizer(self.tokenizer)
            self.eos_ids = frozenset(self.vocab.eos_ids)
            self.num_logits = len(self.vocab)
            self.bad_words = None
        self.ids = corpus_ids(self.tokenizer)
        self.artefact, _ = ArtefactCache(cache_dir=cache_dir()).get(self.vocab, select_wordlists(["en"]))
        self.table = MaskTable.of(self.artefact, self.eos_ids)
        self.always = always_banned_ids(self.artefact, len(self.vocab), self.num_logits)
        self.guarded = self.unguarded = None
        if self.config is not None:  # one processor per engine, as vLLM builds it
            pin = device.type != "cpu"
            self.guarded = GuardLogitsProcessor(self.config, device, is_pin_memory=pin)
            self.unguarded = GuardLogitsProcessor(self.config, device, is_pin_memory=pin)


def _timer(device: torch.device, synced: bool):
    if synced and device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter()


def warm(setup: Setup, tokens: list[int]) -> None:
    """A running server's memo: one request reads ``tokens`` (the corpus' first half) through the processor
    and one row through the batch step's table, before any timed step."""
    logits = torch.zeros((1, setup.num_logits), dtype=torch.float32, device=setup.device)
    output: list[int] = []
    if setup.guarded is not None:
        setup.guarded.update_state(BatchUpdate(1, [], [(0, SamplingParams(extra_args=GUARD), [1], output)], []))
    batch = BatchGuard()
    batch.add(0, MaskRow(setup.table, output, setup.always))
    for token in tokens:
        output.append(token)
        batch.step()
        if setup.guarded is not None:
            setup.guarded.apply(logits)
    if setup.guarded is not None:
        setup.guarded.update_state(BatchUpdate(0, [0], [], []))


def bench(setup: Setup, rows: int, steps: int, warmup: int) -> dict:
    device = setup.device
    start = len(setup.ids) // 2  # the timed rows read the half of the corpus the memo has not seen
    stride = (len(setup.ids) - start) // max(rows, 1)
    outputs = [[] for _ in range(rows)]  # each request's live output ids, as vLLM's InputBatch holds them
    logits = torch.zeros((rows, setup.num_logits), dtype=torch.float32, device=device)
    table = setup.table
    batch = BatchGuard()
    written = BatchGuard()  # batch_write's own rows over the same token lists: each run advances its own batch
    for index in range(rows):
        batch.add(index, MaskRow(table, outputs[index], setup.always))
        written.add(index, MaskRow(table, outputs[index], setup.always))
    writer = MaskWriter(device, pin_memory=device.type == "cuda")
    guarded, unguarded = setup.guarded, setup.unguarded
    if guarded is not None:
        added = [(i, SamplingParams(extra_args=GUARD), [1, 2, 3], outputs[i]) for i in range(rows)]
        guarded.update_state(BatchUpdate(batch_size=rows, removed=[], added=added, moved=[]))
        plain = [(i, SamplingParams(), [1, 2, 3], outputs[i]) for i in range(rows)]
        unguarded.update_state(BatchUpdate(batch_size=rows, removed=[], added=plain, moved=[]))
        bad_words = {i: setup.bad_words for i in range(rows)}

    def run_processor():
        guarded.apply(logits)

    def run_batch():
        batch.step()

    def run_batch_write():
        writer.write(logits, written.step())

    def run_bad_words():
        apply_bad_words(logits, bad_words, outputs)

    def run_unguarded():
        unguarded.apply(logits)

    runs = {"batch_step": run_batch, "batch_write": run_batch_write}
    if guarded is not None:
        runs = {"processor": run_processor, **runs, "unguarded": run_unguarded}
    times: dict[str, list[float]] = {name: [] for name in [*runs, "bad_words"]}
    synced: dict[str, list[float]] = {name: [] for name in times}
    masked = []
    before = (0, 0)

    def timed(name: str, run, step: int) -> None:
        gc.disable()  # as timeit does: the garbage one measurement leaves is not collected inside another's
        started = _timer(device, True)
        run()
        host = time.perf_counter() - started
        done = _timer(device, True)
        gc.enable()
        if step >= warmup:
            times[name].append(host)
            synced[name].append(done - started)

    def read(step: int) -> None:
        for index, out in enumerate(outputs):
            out.append(setup.ids[start + index * stride + step])

    for step in range(warmup + steps):
        read(step)
        if step == warmup:
            before = (table.computed_transitions, table.computed_masks)
        names = list(runs)
        for name in names[step % len(names):] + names[:step % len(names)]:  # rotate: no order bias
            timed(name, runs[name], step)
        if step >= warmup:
            masked.append(len(batch.step().rows))
    if guarded is not None:
        # vLLM's bad_words apart, on the next steps of the same rows: its ~10^5 Python operations a step evict
        # the caches the measurements beside it would run in (measured: x10 on the processor at 256 rows).
        for step in range(warmup + steps, warmup + steps + BAD_WORDS_STEPS):
            read(step)
            timed("bad_words", run_bad_words, step)
    times = {name: values for name, values in times.items() if values}
    # The same steps again by new requests: every lookup now hits the memo, so this is the step's own cost,
    # without what the artefact spends on a (state, token) pair or a state it meets for the first time.
    outputs = [[] for _ in range(rows)]
    batch = BatchGuard()
    for index in range(rows):
        batch.add(index, MaskRow(table, outputs[index], setup.always))
    seen: dict[str, list[float]] = {"batch_step": []}
    again = {"batch_step": run_batch}
    if guarded is not None:
        seen["processor"] = []
        again["processor"] = run_processor
        added = [(i, SamplingParams(extra_args=GUARD), [1, 2, 3], outputs[i]) for i in range(rows)]
        guarded.update_state(BatchUpdate(batch_size=rows, removed=list(range(rows)), added=added, moved=[]))
    for step in range(warmup + steps):
        read(step)
        for name in sorted(again, reverse=step % 2 == 1):
            gc.disable()
            started = time.perf_counter()
            again[name]()
            elapsed = time.perf_counter() - started
            gc.enable()
            if step >= warmup:
                seen[name].append(elapsed)
    if guarded is not None:  # the requests leave: the next configuration joins an empty batch
        guarded.update_state(BatchUpdate(0, list(range(rows)), [], []))
        unguarded.update_state(BatchUpdate(0, list(range(rows)), [], []))
    lookups = rows * steps
    out: dict = {name: percentiles(values) for name, values in times.items()}
    out.update({f"{name}_seen_text": percentiles(values) for name, values in seen.items()})
    if device.type == "cuda":
        out.update({f"{name}_synced": percentiles(values) for name, values in synced.items() if values})
    out["masked_ids_per_step"] = round(statistics.mean(masked), 1)
    out["transition_memo_hit_rate"] = round(1 - (table.computed_transitions - before[0]) / lookups, 4)
    out["mask_memo_hit_rate"] = round(1 - (table.computed_masks - before[1]) / lookups, 4)
    out["missed_hits"] = sum(len(batch[i].missed) for i in range(rows))
    if "processor" in out:
        out["bad_words_over_processor"] = round(out["bad_words"]["p50"] / out["processor"]["p50"], 1)
    floor = FLOORS_MS.get((setup.name, rows))
    if floor is not None and "processor" in out:
        out["floor_ms"] = floor
        out["floor_met"] = out["processor"]["p50"] <= floor
    return out


def throughput(concurrency: list[int], max_tokens: int, reps: int) -> dict:
    """Guarded ÷ unguarded aggregate tokens/s through vLLM's ``LLM`` at each concurrency (see the docstring)."""
    from vllm import LLM

    directory = model_directory("smollm2")
    llm = LLM(model=str(directory), logits_processors=[GuardLogitsProcessor], max_num_seqs=max(concurrency),
              seed=0)
    tokenizer = load_tokenizer("smollm2")
    ids = corpus_ids(tokenizer)
    out: dict = {"model": "smollm2", "max_tokens": max_tokens, "reps": reps}
    for count in concurrency:
        prompts = [{"prompt_token_ids": ids[i * 64:i * 64 + 64]} for i in range(count)]
        rates: dict[str, list[float]] = {"guarded": [], "unguarded": []}
        for rep in range(reps):
            order = ("unguarded", "guarded") if rep % 2 == 0 else ("guarded", "unguarded")
            for name in order:
                extra = GUARD if name == "guarded" else None
                params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True, extra_args=extra)
                started = time.perf_counter()
                results = llm.generate(prompts, params, use_tqdm=False)
                seconds = time.perf_counter() - started
                rates[name].append(sum(len(r.outputs[0].token_ids) for r in results) / seconds)
        guarded, unguarded = statistics.median(rates["guarded"]), statistics.median(rates["unguarded"])
        out[f"requests_{count}"] = {"guarded_tokens_per_s": round(guarded, 1),
                                    "unguarded_tokens_per_s": round(unguarded, 1),
                                    "guarded_over_unguarded": round(guarded / unguarded, 3)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1,64,256", help="batch sizes, comma-separated")
    parser.add_argument("--vocabs", default="smollm2,gemma3", help="models whose vocab to use")
    parser.add_argument("--steps", type=int, default=64, help="timed steps per configuration")
    parser.add_argument("--warmup", type=int, default=16, help="steps before the timed ones")
    parser.add_argument("--device", default="cpu", help="where the logits live (cpu, cuda)")
    parser.add_argument("--tokenizer-dir", type=Path, default=None,
                        help="read each vocab's tokenizer from DIR/<name> (no bundled model packages needed)")
    parser.add_argument("--throughput", default="", help="vLLM tokens/s at these concurrencies instead (GPU)")
    parser.add_argument("--max-tokens", type=int, default=128, help="tokens per request (--throughput)")
    parser.add_argument("--reps", type=int, default=2, help="guarded/unguarded runs per concurrency (--throughput)")
    args = parser.parse_args()
    if args.throughput:
        counts = [int(c) for c in args.throughput.split(",")]
        result = throughput(counts, args.max_tokens, args.reps)
        if torch.cuda.is_available():
            result["gpu"] = torch.cuda.get_device_name(0)
        print(json.dumps(result))
        return
    device = torch.device(args.device)
    result: dict = {"device": str(device), "steps": args.steps, "warmup": args.warmup,
                    "torch_threads": torch.get_num_threads(), "vllm": SamplingParams is not None}
    if device.type == "cuda":
        result["gpu"] = torch.cuda.get_device_name(device)
    for name in args.vocabs.split(","):
        setup = Setup(name, device, args.tokenizer_dir)
        warmed = time.perf_counter()
        warm(setup, setup.ids[:len(setup.ids) // 2])
        gc.collect()
        gc.freeze()  # what vLLM does after start-up: the heap so far is never scanned again
        entry = {"vocab": len(setup.vocab), "num_logits": setup.num_logits, "corpus_tokens": len(setup.ids),
                 "always_banned": int(len(setup.artefact.always_banned)),
                 "memo_warmup_tokens": len(setup.ids) // 2, "memo_warmup_s": round(time.perf_counter() - warmed, 1)}
        if setup.bad_words is not None:
            entry["bad_words_token_sequences"] = len(setup.bad_words)
        for rows in (int(r) for r in args.rows.split(",")):
            entry[f"rows_{rows}"] = bench(setup, rows, args.steps, args.warmup)
        result[name] = entry
    result["floors_met"] = all(entry[f"rows_{rows}"].get("floor_met", True) for (name, rows) in FLOORS_MS
                               if name in result and f"rows_{rows}" in result[name])
    result["corpus"] = "pydoc_data.topics (Python's documentation, English prose), tokenized per vocab"
    print(json.dumps(result, ensure_ascii=False))


if __name__ == "__main__":
    np.seterr(all="raise")
    main()
