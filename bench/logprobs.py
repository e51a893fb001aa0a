"""Logprobs benchmark: what asking for them costs on the embedded transformers engine (single stream).

Prints one JSON object. The same greedy generations (the leak suite's prompts, bundled ``en`` list, SmolLM2)
run without logprobs (the baseline), with ``logprobs=0`` (the pick's own: one ``log_softmax`` per position)
and with ``logprobs=5`` (plus one ``topk`` and the guard's check of each alternative), interleaved prompt by
prompt (the machine is shared and noisy); tokens/s of each, their ratio to the baseline, and whether the
texts are equal (they must be: logprobs never change what is picked).

Usage: python bench/logprobs.py [--tokens 48] [--prompts 6] [--reps 2]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's guardrail, not the venv's

import torch  # noqa: E402

from guardrail.engines.transformers.decoder import StreamingDecoder, generation_eos_ids  # noqa: E402
from guardrail.guard.events import Finish  # noqa: E402
from guardrail.matching.compiler import compile_artefact  # noqa: E402
from guardrail.matching.vocab import TokenVocab  # noqa: E402
from guardrail.models import load_model, load_tokenizer  # noqa: E402
from guardrail.params import SamplingParams  # noqa: E402
from guardrail.prompts import prompt_ids  # noqa: E402
from guardrail.wordlists.wordlist import bundled_wordlist  # noqa: E402

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
MODES = {"off": None, "logprobs_0": 0, "logprobs_5": 5}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=48, help="max_tokens per generation")
    parser.add_argument("--prompts", type=int, default=6, help="prompts of the leak suite")
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args()

    tokenizer = load_tokenizer("smollm2")
    model = load_model("smollm2")
    vocab = TokenVocab.from_tokenizer(tokenizer, eos_ids=generation_eos_ids(model))
    decoder = StreamingDecoder(model, tokenizer, vocab)
    artefact = compile_artefact(vocab, [bundled_wordlist("en")])
    cases = json.loads((DATA / "leak_prompts.json").read_text(encoding="utf-8"))[:args.prompts]
    prompts = [prompt_ids(tokenizer, messages=[{"role": "user", "content": c["prompt"]}]) for c in cases]
    list(decoder.stream(prompts[0], artefact, SamplingParams(temperature=0, max_tokens=4, logprobs=5)))  # warm-up

    seconds = dict.fromkeys(MODES, 0.0)
    tokens = dict.fromkeys(MODES, 0)
    texts: dict[str, list[str]] = {mode: [] for mode in MODES}
    for _ in range(args.reps):
        for prompt in prompts:
            for mode, k in MODES.items():
                params = SamplingParams(temperature=0, max_tokens=args.tokens, logprobs=k, timeout_s=3600.0)
                started = time.perf_counter()
                finish = list(decoder.stream(prompt, artefact, params))[-1]
                seconds[mode] += time.perf_counter() - started
                assert isinstance(finish, Finish)
                tokens[mode] += finish.usage.completion_tokens
                texts[mode].append(finish.text)
    rate = {mode: tokens[mode] / seconds[mode] for mode in MODES}
    print(json.dumps({
        "model": "smollm2",
        "torch_threads": torch.get_num_threads(),
        "runs": len(prompts) * args.reps,
        "tokens_per_s": {mode: round(value, 2) for mode, value in rate.items()},
        "over_off": {mode: round(rate[mode] / rate["off"], 3) for mode in MODES if mode != "off"},
        "same_text_as_off": {mode: texts[mode] == texts["off"] for mode in MODES if mode != "off"},
    }))


if __name__ == "__main__":
    main()
