"""``guardrail serve``: run the HTTP service with uvicorn.

Flags override the ``GUARDRAIL_*`` environment; everything else (Redis, tokens, limits) is configured
through the environment (docs/service.md).
"""

from __future__ import annotations

import argparse
import sys

from guardrail.matching.obfuscation import DEFAULT_OBFUSCATION
from guardrail.params import EVASION_GUARD_MODES
from guardrail.wordlists.selection import split_names


def add_serve_command(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``serve`` on the ``guardrail`` parser's subparsers."""
    from service.cli.options import HelpFormatter, obfuscation_option

    serve = subparsers.add_parser(
        "serve",
        formatter_class=HelpFormatter,
        help="run the OpenAI-compatible HTTP service",
        description="Run the OpenAI-compatible HTTP service (docs/service.md). Without GUARDRAIL_REDIS_URL "
        "the word lists live in the embedded store under GUARDRAIL_DATA_DIR.",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to bind")
    serve.add_argument("--port", type=int, default=8000, help="port to bind")
    serve.add_argument("--model", default=None, help="smollm2 | gemma3 | local HF dir | .gguf path "
                       "(default: GUARDRAIL_MODEL, else smollm2)")
    serve.add_argument("--engine", choices=("transformers", "vllm", "remote"), default=None,
                       help="generation engine (default: GUARDRAIL_ENGINE, else transformers; docs/engines.md)")
    serve.add_argument("--upstream", default=None, metavar="URL",
                       help="--engine remote: the inference server to guard, e.g. http://127.0.0.1:8001 "
                       "(default: GUARDRAIL_UPSTREAM_URL)")
    serve.add_argument("--tokenizer", default=None, metavar="NAME_OR_DIR",
                       help="the tokenizer, checked against the upstream's (default: GUARDRAIL_TOKENIZER, "
                       "else the model's)")
    serve.add_argument("--wordlist", action="append", default=None, metavar="NAME[,NAME…]",
                       help="default word lists: stored names or .txt files (default: GUARDRAIL_WORDLISTS, else en)")
    serve.add_argument("--redis-url", default=None, help="share lists and artefacts through Redis "
                       "(default: GUARDRAIL_REDIS_URL; unset = embedded store)")
    serve.add_argument("--evasion-guard", choices=EVASION_GUARD_MODES, default=None,
                       help="match a term that caused a rollback as a substring for the rest of the answer "
                       "(default: GUARDRAIL_EVASION_GUARD, else substring)")
    serve.add_argument("--obfuscation", default=None, metavar="LEVEL[+markup]", type=obfuscation_option,
                       help="obfuscated forms that match too, for lists without their own level: off | homoglyphs | "
                       "leet | spaced | masked, optionally +markup (default: GUARDRAIL_OBFUSCATION, else "
                       f"{DEFAULT_OBFUSCATION})")
    serve.add_argument("--chat-template", default=None, metavar="NAME|PATH|JINJA",
                       help="chat template instead of the tokenizer's: hermes (bundled, ChatML with tool calls), a "
                       "file, or the template text (default: GUARDRAIL_CHAT_TEMPLATE, else the tokenizer's)")
    serve.add_argument("--tool-call-parser", choices=("hermes", "json"), default=None,
                       help="how tool calls are read from answers (default: GUARDRAIL_TOOL_CALL_PARSER, else hermes)")
    serve.add_argument("--log-level", default=None, help="DEBUG | INFO | WARNING | ERROR "
                       "(default: GUARDRAIL_LOG_LEVEL, else INFO)")
    serve.set_defaults(handler=run_serve)
    return serve


def run_serve(args: argparse.Namespace) -> int:
    """Build the settings (flags over environment) and serve until SIGTERM or SIGINT, which drain first
    (``GUARDRAIL_DRAIN_TIMEOUT_S``); a second signal stops at once."""
    import uvicorn

    from service.app import create_app
    from service.drain import CLOSE_TIMEOUT_S, DrainingServer
    from service.logs import configure_logging
    from service.settings import Settings

    overrides: dict[str, object] = {}
    if args.model is not None:
        overrides["model"] = args.model
    if args.engine is not None:
        overrides["engine"] = args.engine
    if args.upstream is not None:
        overrides["upstream_url"] = args.upstream
    if args.tokenizer is not None:
        overrides["tokenizer"] = args.tokenizer
    if args.wordlist is not None:
        overrides["wordlists"] = split_names(args.wordlist)
    if args.redis_url is not None:
        overrides["redis_url"] = args.redis_url
    if args.log_level is not None:
        overrides["log_level"] = args.log_level
    if args.evasion_guard is not None:
        overrides["evasion_guard"] = args.evasion_guard
    if args.obfuscation is not None:
        overrides["obfuscation"] = args.obfuscation
    if args.chat_template is not None:
        overrides["chat_template"] = args.chat_template
    if args.tool_call_parser is not None:
        overrides["tool_call_parser"] = args.tool_call_parser
    settings = Settings(**overrides)
    configure_logging(settings.log_level)  # before uvicorn's first lines
    app = create_app(settings)
    # log_config=None keeps the JSON logging create_app configured; our middleware writes the access log.
    config = uvicorn.Config(app, host=args.host, port=args.port, log_config=None, access_log=False,
                            timeout_graceful_shutdown=CLOSE_TIMEOUT_S)
    sockets = None
    if settings.admin_port is not None:  # /admin, /metrics, /console on a port of their own (service/admin_port.py)
        if settings.admin_port == args.port:
            print(f"guardrail serve: GUARDRAIL_ADMIN_PORT ({settings.admin_port}) must differ from --port",
                  file=sys.stderr)
            return 2
        admin = uvicorn.Config(app, host=args.host, port=settings.admin_port)
        sockets = [config.bind_socket(), admin.bind_socket()]
    # SIGTERM drains first (docs/service.md, "Health, readiness and drain"), then uvicorn shuts down.
    DrainingServer(config, app).run(sockets=sockets)
    return 0
