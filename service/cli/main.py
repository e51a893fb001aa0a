"""The ``guardrail`` console script: ``compile``, ``check``, ``generate``, ``serve``, ``tenants``.

Every command takes ``--json`` to print one machine-readable JSON object on stdout. Exit codes: 0 done,
1 ``check`` found a match (as ``grep`` does), 2 bad arguments or input.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence

from guardrail.wordlists.wordlist import WordListError
from service.cli.options import HelpFormatter, add_json_option, add_wordlist_options, selected_wordlists


def _emit(args: argparse.Namespace, payload: dict, human: str) -> None:
    print(json.dumps(payload, ensure_ascii=False) if args.json else human)


def _cmd_compile(args: argparse.Namespace) -> int:
    from guardrail.matching.cache import ArtefactCache
    from guardrail.matching.vocab import TokenVocab
    from guardrail.models import cache_dir, load_tokenizer, progress

    wordlists = selected_wordlists(args)
    started = time.perf_counter()
    tokenizer = load_tokenizer(args.model)
    vocab = TokenVocab.from_tokenizer(tokenizer)
    load_seconds = time.perf_counter() - started
    cache = ArtefactCache(redis_url=os.environ.get("GUARDRAIL_REDIS_URL") or None,
                          cache_dir=None if args.no_cache else cache_dir())
    started = time.perf_counter()
    with progress(f"compiling {sum(len(w.terms) for w in wordlists)} terms for {args.model} (or reading the cache)"):
        artefact, layer = cache.get(vocab, wordlists)
    seconds = time.perf_counter() - started
    payload = {
        "model": args.model,
        "wordlists": [w.name for w in wordlists],
        "terms": len(artefact.terms),
        "vocab_size": len(vocab.token_bytes),
        "automaton_states": sum(a.num_nodes for a in artefact.automata),
        "always_banned_tokens": int(len(artefact.always_banned)),
        "seconds": round(seconds, 4),
        "tokenizer_load_seconds": round(load_seconds, 4),
        "cache_layer": "none" if layer == "compile" else layer,
    }
    _emit(args, payload, "\n".join(f"{k}: {v}" for k, v in payload.items()))
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    from guardrail.matching.textmatch import TextMatcher

    text = args.text if args.text is not None else sys.stdin.read()
    matches = TextMatcher(selected_wordlists(args)).scan(text)
    payload = {"matches": [{"term": m.term, "list": m.list_name, "start": m.start, "end": m.end,
                            "text": text[m.start:m.end]} for m in matches]}
    human = "\n".join(f"{m.start}-{m.end}\t{m.list_name}\t{m.term}\t{text[m.start:m.end]!r}" for m in matches)
    _emit(args, payload, human or "no matches")
    return 1 if matches else 0


def build_parser() -> argparse.ArgumentParser:
    import guardrail

    parser = argparse.ArgumentParser(prog="guardrail", description=__doc__.splitlines()[0],
                                     formatter_class=HelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {guardrail.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    compile_ = sub.add_parser(
        "compile", help="compile word lists for a model's tokenizer", formatter_class=HelpFormatter,
        description="Compile word lists into a token automaton for a model's tokenizer (cached in "
        "GUARDRAIL_CACHE_DIR, shared through GUARDRAIL_REDIS_URL when set).")
    compile_.add_argument("--model", default="smollm2", help="smollm2 | gemma3 | local HF dir | .gguf path")
    add_wordlist_options(compile_)
    compile_.add_argument("--no-cache", action="store_true", help="skip the on-disk artefact cache")
    add_json_option(compile_)
    compile_.set_defaults(handler=_cmd_compile)

    check = sub.add_parser("check", help="scan a text for banned terms (exit 1 on a match, like grep)",
                           formatter_class=HelpFormatter,
                           description="Scan a text for banned terms. Exit code: 0 no match, 1 a match, 2 an error.")
    check.add_argument("text", nargs="?", default=None, help="the text to scan (default: read standard input)")
    add_wordlist_options(check)
    add_json_option(check)
    check.set_defaults(handler=_cmd_check)

    # Both modules import only argparse-level code at import time; the model and FastAPI load in the handlers.
    from service.cli.generate import add_generate_command
    from service.cli.serve import add_serve_command
    from service.cli.tenants import add_tenants_command

    add_generate_command(sub)
    add_serve_command(sub)
    add_tenants_command(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args) or 0
    except (WordListError, ValueError) as exc:
        print(f"guardrail {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
