"""Grammar-engine benchmark: llguidance against xgrammar for JSON structured output (docs/structured-output.md).

Prints one JSON object. For both bundled tokenizers (SmolLM2, 49,152 ids; Gemma 3, 262,144 ids) and both
engines, on the JSON documents of :data:`CASES` (each a ``response_format`` the service accepts, and a valid
answer to it, serialised as the grammar allows it: ``", "`` and ``": "`` separators, no other whitespace):

- ``tokenizer_s``: building the engine's tokenizer view (once per vocab and process);
- ``compile_ms``: compiling the schema into a grammar, median of ``--reps`` fresh compiles (xgrammar's compiler
  cache is cleared before each);
- ``mask_us_p50`` / ``mask_us_p99``: the token mask of one position (a bitmask of ``ceil(vocab / 32)`` int32,
  written in place), over every position of the answer (``--reps`` passes, a fresh matcher each);
- ``advance_us_p50``: consuming the picked token;
- ``rollback8_us_p50``: rolling 8 tokens back and consuming them again (the guard's rollback path);
- ``apply_us_p50``: what the decoder adds to use the mask on one ``(1, vocab)`` float32 row (unpack the
  bitmask, ``masked_fill_``: guardrail.grammar.matcher.GrammarState.apply), same for both engines.

Baseline, same run: ``guard_mask_us_p50``, the guard's own per-position mask (``BanMask.apply`` of the bundled
``en`` list's always-banned ids on a ``(1, vocab)`` row), i.e. what every guarded token already costs.

``tool_calls`` (llguidance only): the tool-call grammar of service/tool_grammar.py (Lark, the Hermes markup and
an inline ``%json`` per tool, :data:`TOOLS`) for a named choice, ``required`` over three tools and ``auto`` with
strict tools (text first, then the call), on a call of ``create_contact`` (:data:`PERSON`'s arguments):
``compile_ms``, ``mask_us_p50`` / ``mask_us_p99`` over every position, and ``per_token_us_p50``: what the
decoder's ``GrammarState.apply`` costs per generated token (consume the kept token, compute the mask, add it to a
``(1, vocab)`` row), i.e. what the grammar adds to each token masking first; and beside it ``check_first``, what
the decoder does by default (``GrammarState.pick``: the forced token where the grammar forces one, else the pick
checked against the grammar, masked only on a refusal): ``per_token_us_p50``, the grammar's own work per token
(``GrammarState.pick`` less the time inside its picker calls; the row's argmax is the answer's token: the model
agrees), ``refused_per_token_us_p50`` the same where the argmax is an id the grammar forbids (free positions only;
the second pick counted), ``plain_pick_us_p50`` one ``TokenPicker.pick`` (what a forced token saves),
``picks_last_rep`` how the picks were decided, and ``ratio_to_mask_first``. Issue 30's floor: the grammar adds
<= 50 us p50 per token.

xgrammar is not a dependency of guardrail (vLLM's environment has it): install it to compare,
``pip install -c constraints-vllm.txt xgrammar``; without it its rows say ``skipped``.

Usage: python bench/grammar.py [--reps 5] [--tokenizers smollm2,gemma3]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

# This checkout first: its guardrail and its service package (bench/service.py would shadow the latter).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from guardrail.engines.transformers.sampling import BanMask, TokenPicker  # noqa: E402
from guardrail.grammar.matcher import unpack_bitmask  # noqa: E402
from guardrail.matching.cache import ArtefactCache  # noqa: E402
from guardrail.matching.vocab import TokenVocab  # noqa: E402
from guardrail.models import load_tokenizer  # noqa: E402
from guardrail.params import SamplingParams  # noqa: E402
from guardrail.wordlists.wordlist import bundled_wordlist  # noqa: E402
from service.tool_grammar import ToolSpec, tool_grammar  # noqa: E402

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0},
        "email": {"type": "string", "format": "email"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
        "role": {"enum": ["admin", "editor", "viewer"]},
        "address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string",
                    "pattern": "^[0-9]{5}$"}}, "required": ["city", "zip"], "additionalProperties": False},
    },
    "required": ["name", "age", "email", "tags", "role", "address"],
    "additionalProperties": False,
}
#: (case name, JSON schema of the grammar, a valid answer).
CASES = [
    ("json_object", {"type": "object"},
     {"title": "Weekly report", "items": [{"id": 1, "done": True}, {"id": 2, "done": False}],
      "notes": "All systems nominal; the backlog shrank by twelve tickets this week."}),
    ("name_schema", {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"],
                     "additionalProperties": False},
     {"name": "Captain Whiskers, the orange tabby who guards the harbour"}),
    ("person_schema", PERSON,
     {"name": "Ada Lovelace", "age": 36, "email": "ada@example.org", "tags": ["math", "engines", "poetry"],
      "role": "editor", "address": {"city": "London", "zip": "12345"}}),
]
SEPARATORS = (", ", ": ")
#: The tools of the ``tool_calls`` rows; the call measured is ``create_contact`` with :data:`CASES`' person.
TOOLS = [
    ToolSpec("get_weather", {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
             strict=True),
    ToolSpec("create_contact", PERSON, strict=True),
    ToolSpec("set_timer", {"type": "object", "properties": {"minutes": {"type": "integer"}}, "required": ["minutes"]},
             strict=True),
]


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[int(q * (len(ordered) - 1))], 2)


class LLGuidance:
    name = "llguidance"

    def __init__(self, tokenizer) -> None:
        import llguidance.hf

        self.lib = llguidance
        self.tokenizer = llguidance.hf.from_tokenizer(tokenizer)
        self.vocab_size = self.tokenizer.vocab_size

    def compile(self, schema: dict):
        from llguidance import LLMatcher

        grammar = LLMatcher.grammar_from_json_schema(
            schema, defaults={"whitespace_flexible": False, "item_separator": SEPARATORS[0],
                              "key_separator": SEPARATORS[1]})
        error = LLMatcher.validate_grammar(grammar, self.tokenizer)
        assert not error, error
        return grammar

    def matcher(self, grammar):
        return self.lib.LLMatcher(self.tokenizer, grammar)

    def fill(self, matcher, bitmask: torch.Tensor) -> None:
        matcher.unsafe_compute_mask_ptr(bitmask.data_ptr(), bitmask.numel() * 4)

    def advance(self, matcher, token: int) -> None:
        assert matcher.consume_token(token), matcher.get_error()

    def rollback(self, matcher, n: int) -> None:
        assert matcher.rollback(n)


class XGrammar:
    name = "xgrammar"

    def __init__(self, tokenizer) -> None:
        import xgrammar

        self.xgr = xgrammar
        self.info = xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=len(tokenizer))
        self.compiler = xgrammar.GrammarCompiler(self.info)
        self.vocab_size = self.info.vocab_size

    def compile(self, schema: dict):
        self.compiler.clear_cache()
        return self.compiler.compile_json_schema(json.dumps(schema), any_whitespace=False, separators=SEPARATORS)

    def matcher(self, grammar):
        return self.xgr.GrammarMatcher(grammar)

    def fill(self, matcher, bitmask: torch.Tensor) -> None:
        matcher.fill_next_token_bitmask(bitmask.view(1, -1))

    def advance(self, matcher, token: int) -> None:
        assert matcher.accept_token(token)

    def rollback(self, matcher, n: int) -> None:
        matcher.rollback(n)


def bench_engine(engine_cls, tokenizer, reps: int) -> dict:
    started = time.perf_counter()
    engine = engine_cls(tokenizer)
    out: dict = {"tokenizer_s": round(time.perf_counter() - started, 3)}
    words = (engine.vocab_size + 31) // 32
    bitmask = torch.zeros(words, dtype=torch.int32)
    row = torch.zeros((1, len(tokenizer)), dtype=torch.float32)
    for case, schema, answer in CASES:
        text = json.dumps(answer, separators=SEPARATORS, ensure_ascii=False)
        tokens = tokenizer.encode(text, add_special_tokens=False)
        compile_ms = []
        for _ in range(reps):
            t = time.perf_counter()
            grammar = engine.compile(schema)
            compile_ms.append((time.perf_counter() - t) * 1e3)
        mask_us, advance_us, apply_us, rollback_us = [], [], [], []
        for _ in range(reps):
            matcher = engine.matcher(grammar)
            for position, token in enumerate(tokens):
                t = time.perf_counter()
                engine.fill(matcher, bitmask)
                mask_us.append((time.perf_counter() - t) * 1e6)
                allowed = unpack_bitmask(bitmask.numpy(), row.shape[1])
                assert allowed[token], (engine.name, case, position, tokenizer.decode([token]))
                t = time.perf_counter()
                row.masked_fill_(torch.from_numpy(~unpack_bitmask(bitmask.numpy(), row.shape[1])), -float("inf"))
                apply_us.append((time.perf_counter() - t) * 1e6)
                t = time.perf_counter()
                engine.advance(matcher, token)
                advance_us.append((time.perf_counter() - t) * 1e6)
                if position >= 8 and position % 8 == 0:
                    t = time.perf_counter()
                    engine.rollback(matcher, 8)
                    for again in tokens[position - 7:position + 1]:
                        engine.advance(matcher, again)
                    rollback_us.append((time.perf_counter() - t) * 1e6)
        out[case] = {
            "answer_tokens": len(tokens),
            "compile_ms": round(statistics.median(compile_ms), 3),
            "mask_us_p50": _pct(mask_us, 0.5),
            "mask_us_p99": _pct(mask_us, 0.99),
            "advance_us_p50": _pct(advance_us, 0.5),
            "rollback8_us_p50": _pct(rollback_us, 0.5),
            "apply_us_p50": _pct(apply_us, 0.5),
        }
    return out


def bench_tool_calls(tokenizer, reps: int) -> dict:
    from llguidance import LLMatcher

    from guardrail.grammar.matcher import GrammarState

    vocab = TokenVocab.from_tokenizer(tokenizer)
    engine = LLGuidance(tokenizer)
    bitmask = torch.zeros((engine.vocab_size + 31) // 32, dtype=torch.int32)
    row = torch.zeros((1, len(tokenizer)), dtype=torch.float32)
    person = json.dumps(CASES[2][2], separators=SEPARATORS, ensure_ascii=False)
    call = '<tool_call>\n{"name": "create_contact", "arguments": ' + person + "}\n</tool_call>"
    picker = TokenPicker(SamplingParams(temperature=0))
    # An id the tool call forbids (a control byte; auto's text before it allows it), the refused rows' argmax.
    forbidden = next(t for t, b in enumerate(vocab.token_bytes) if b == b"\x01")
    inside: list[float] = []  # seconds spent in each picker call of one GrammarState.pick

    def timed_pick(scores: torch.Tensor) -> int | None:
        t = time.perf_counter()
        token = picker.pick(scores)
        inside.append(time.perf_counter() - t)
        return token

    out: dict = {}
    for label, mode, text in (("named", "named", call), ("required", "required", call),
                              ("auto_strict", "auto", "Let me add this contact for you.\n" + call)):
        spec = tool_grammar("hermes", TOOLS, mode, "create_contact")
        tokens = tokenizer.encode(text, add_special_tokens=False)
        compile_ms, mask_us, token_us, pick_us, check_us, refused_us = [], [], [], [], [], []
        for _ in range(reps):
            t = time.perf_counter()
            grammar = LLMatcher.grammar_from_lark(spec.schema)
            error = LLMatcher.validate_grammar(grammar, engine.tokenizer)
            compile_ms.append((time.perf_counter() - t) * 1e3)
            assert not error, error
            matcher = engine.matcher(grammar)
            for token in tokens:  # the mask alone, as in the JSON rows
                t = time.perf_counter()
                engine.fill(matcher, bitmask)
                mask_us.append((time.perf_counter() - t) * 1e6)
                engine.advance(matcher, token)
            # What the decoder does per token masking first (GrammarState.apply: consume the kept token, mask, add
            # the mask; the pick after it costs what it costs without a grammar).
            state = GrammarState(spec, tokenizer, vocab, [tokenizer.eos_token_id], row.shape[1])
            for position in range(len(tokens) + 1):
                row.zero_()
                t = time.perf_counter()
                state.apply(row, tokens[:position])
                token_us.append((time.perf_counter() - t) * 1e6)
                assert position == len(tokens) or not torch.isinf(row[0, tokens[position]])
            # Checking the pick first (GrammarState.pick), the answer's token the row's argmax (the model agrees):
            # the grammar's own work, the time inside the picker left out (at a forced token it picks nothing).
            state = GrammarState(spec, tokenizer, vocab, [tokenizer.eos_token_id], row.shape[1])
            for position in range(len(tokens)):
                row.zero_()
                row[0, tokens[position]] = 1.0
                inside.clear()
                t = time.perf_counter()
                got = state.pick(row, tokens[:position], timed_pick)
                elapsed = time.perf_counter() - t
                assert got == tokens[position], (label, position)
                check_us.append((elapsed - sum(inside)) * 1e6)
                pick_us.extend(x * 1e6 for x in inside)
            picks = dict(state.picks)
            # The model disagrees: the row's argmax is an id the grammar forbids (where nothing is forced: masked
            # and picked again); the first pick left out, the second counted (the grammar caused it).
            state = GrammarState(spec, tokenizer, vocab, [tokenizer.eos_token_id], row.shape[1])
            for position in range(len(tokens)):
                state.sync(tokens[:position])
                if state.forced() is not None or state.allows(forbidden):  # auto's text takes any byte
                    continue
                row.zero_()
                row[0, forbidden] = 2.0
                row[0, tokens[position]] = 1.0
                inside.clear()
                t = time.perf_counter()
                got = state.pick(row, tokens[:position], timed_pick)
                refused_us.append((time.perf_counter() - t - inside[0]) * 1e6)
                assert got == tokens[position], (label, position)
        added = _pct(check_us, 0.5)
        out[label] = {"answer_tokens": len(tokens), "compile_ms": round(statistics.median(compile_ms), 3),
                      "mask_us_p50": _pct(mask_us, 0.5), "mask_us_p99": _pct(mask_us, 0.99),
                      "per_token_us_p50": _pct(token_us, 0.5), "per_token_us_p99": _pct(token_us, 0.99),
                      "check_first": {"per_token_us_p50": added, "per_token_us_p99": _pct(check_us, 0.99),
                                      "plain_pick_us_p50": _pct(pick_us, 0.5),
                                      "refused_per_token_us_p50": _pct(refused_us, 0.5),
                                      "picks_last_rep": picks,
                                      "ratio_to_mask_first": round(added / _pct(token_us, 0.5), 3)}}
    return out


def guard_baseline(tokenizer, reps: int) -> dict:
    vocab = TokenVocab.from_tokenizer(tokenizer)
    artefact = ArtefactCache().get(vocab, [bundled_wordlist("en")])[0]
    banned = np.asarray(artefact.always_banned, dtype=np.int64)
    row = torch.zeros((1, len(tokenizer)), dtype=torch.float32)
    times = []
    for _ in range(reps * 200):
        mask = BanMask()  # a fresh cache: the index tensor is rebuilt, as after a change of bans
        t = time.perf_counter()
        mask.apply(row, banned)
        times.append((time.perf_counter() - t) * 1e6)
    return {"always_banned_ids": int(len(banned)), "guard_mask_us_p50": _pct(times, 0.5),
            "guard_mask_us_p99": _pct(times, 0.99)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--tokenizers", default="smollm2,gemma3")
    args = parser.parse_args()
    torch.set_num_threads(1)
    results: dict = {}
    for name in args.tokenizers.split(","):
        tokenizer = load_tokenizer(name)
        results[name] = {"vocab": len(tokenizer), "baseline": guard_baseline(tokenizer, args.reps)}
        for engine_cls in (LLGuidance, XGrammar):
            try:
                results[name][engine_cls.name] = bench_engine(engine_cls, tokenizer, args.reps)
            except ImportError as exc:  # xgrammar is not a dependency: only this comparison needs it
                results[name][engine_cls.name] = {"skipped": f"{exc} (pip install -c constraints-vllm.txt xgrammar)"}
        results[name]["tool_calls"] = bench_tool_calls(tokenizer, args.reps)
    versions = {}
    for package in ("llguidance", "xgrammar", "torch"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    print(json.dumps({"benchmark": "grammar", "machine": platform.machine(), "cpus": os.cpu_count(),
                      "versions": versions, "reps": args.reps, "results": results}, indent=2))


if __name__ == "__main__":
    main()
