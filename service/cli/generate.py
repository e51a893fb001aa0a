"""``guardrail generate``: guarded generation from the command line.

    guardrail generate --model smollm2 --chat "Say hello" --banned "hello" --temperature 0 --stream
    guardrail generate --model gemma3 --prompt "Once upon a time" --max-tokens 40 --json

``--stream`` prints text as it is released; ``--json`` prints one object (``text``, ``finish_reason``,
``usage``, ``rollbacks``) on stdout — with both, the streamed text goes to stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from guardrail.params import DEFAULT_EVASION_GUARD, EVASION_GUARD_MODES
from service.cli.options import HelpFormatter, add_json_option, add_wordlist_options, selected_wordlists


def parse_logit_bias(value: str) -> dict[int, float]:
    """``"ID:BIAS,ID:BIAS"`` → ``{id: bias}``.

    Raises:
        argparse.ArgumentTypeError: naming the malformed item.
    """
    bias: dict[int, float] = {}
    for item in filter(None, (part.strip() for part in value.split(","))):
        token, sep, number = item.partition(":")
        try:
            if not sep:
                raise ValueError
            bias[int(token)] = float(number)
        except ValueError:
            raise argparse.ArgumentTypeError(f"--logit-bias: expected ID:BIAS, got {item!r}") from None
    return bias


def add_generate_command(subparsers) -> argparse.ArgumentParser:
    """Register ``generate`` on the ``guardrail`` sub-command parser."""
    parser = subparsers.add_parser("generate", help="generate text that never contains a banned term",
                                   formatter_class=HelpFormatter,
                                   description="Generate text that never contains a banned term (guardrail.api.Guard).")
    parser.add_argument("--model", default="smollm2", help="smollm2 | gemma3 | local HF dir | .gguf path")
    add_wordlist_options(parser)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--prompt", help="raw completion prompt (base models such as gemma3)")
    source.add_argument("--chat", help="one user message, formatted with the model's chat template")
    parser.add_argument("--stream", action="store_true", help="print text as it is released")
    parser.add_argument("--max-tokens", type=int, default=256, help="completion tokens at most")
    parser.add_argument("--temperature", type=float, default=1.0, help="0 for greedy decoding")
    parser.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass; 1 = off")
    parser.add_argument("--top-k", type=int, default=0, help="keep the k most likely tokens; 0 = off")
    parser.add_argument("--seed", type=int, default=None, help="sampling seed (default: random)")
    parser.add_argument("--stop", action="append", default=[], help="stop string (repeatable; default: none)")
    parser.add_argument("--logit-bias", type=parse_logit_bias, default={}, metavar="ID:BIAS,…",
                        help="add BIAS in [-100, 100] to token ID's logit (default: none)")
    parser.add_argument("--watermark", action="store_true", help="add the green-list watermark")
    parser.add_argument("--timeout", type=float, default=60.0, help="wall-clock limit in seconds")
    parser.add_argument("--evasion-guard", choices=EVASION_GUARD_MODES, default=DEFAULT_EVASION_GUARD,
                        help="substring: a term that caused a rollback is also matched as a substring for the rest "
                        "of the answer (glued and _-joined forms); off: terms keep their own match mode")
    add_json_option(parser)
    parser.set_defaults(handler=run_generate)
    return parser


def run_generate(args: argparse.Namespace) -> int:
    """Handler of ``guardrail generate``; returns the exit code (0, also for ``content_filter``)."""
    from guardrail.api import Completion, Guard
    from guardrail.guard.events import Finish, Rollback, TextDelta

    wordlists = selected_wordlists(args)  # validate names before loading the model
    guard = Guard.load_lists(args.model, wordlists)
    params = dict(max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                  seed=args.seed, stop=tuple(args.stop), logit_bias=args.logit_bias, watermark=args.watermark,
                  timeout_s=args.timeout, evasion_guard=args.evasion_guard)
    source = {"prompt": args.prompt} if args.prompt is not None else {
        "messages": [{"role": "user", "content": args.chat}]}
    out = sys.stderr if args.json else sys.stdout
    rollbacks: list[Rollback] = []
    done: Completion | None = None
    for event in guard.stream(**source, **params):
        if isinstance(event, TextDelta) and args.stream:
            print(event.text, end="", file=out, flush=True)
        elif isinstance(event, Rollback):
            rollbacks.append(event)
        elif isinstance(event, Finish):
            done = Completion(event.text, event.reason, event.usage, tuple(rollbacks))
    if args.json:
        if args.stream:
            print(file=out)
        print(json.dumps({
            "text": done.text,
            "finish_reason": done.finish_reason,
            "usage": dataclasses.asdict(done.usage),
            "rollbacks": [dataclasses.asdict(r) for r in done.rollbacks],
        }, ensure_ascii=False))
    else:
        print("" if args.stream else done.text)
        usage = done.usage
        print(f"[finish_reason={done.finish_reason} tokens={usage.completion_tokens} rollbacks={usage.rollbacks} "
              f"forward_passes={usage.forward_passes} reprefills={usage.reprefills} seconds={usage.seconds:.2f}]",
              file=sys.stderr)
    return 0
