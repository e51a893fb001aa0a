"""Options and helpers shared by the ``guardrail`` commands (service/cli/main.py assembles them)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from guardrail.matching.obfuscation import DEFAULT_OBFUSCATION, Obfuscation
from guardrail.wordlists.wordlist import with_obfuscation


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Appends ``(default: X)`` to every option that has a default worth showing (not ``None``/``False``,
    whose meaning the help text says) and does not already mention it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if "default" in text or default is None or default is False or default is argparse.SUPPRESS or (
                isinstance(default, (list, dict)) and not default):
            return text
        return super()._get_help_string(action)


def obfuscation_option(value: str) -> Obfuscation:
    """``--obfuscation``'s parser (argparse shows the message naming the bad part, exit code 2)."""
    try:
        return Obfuscation.parse(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def add_wordlist_options(parser: argparse.ArgumentParser, default: Sequence[str] = ("en",)) -> None:
    """``--wordlist NAME[,NAME…]`` (repeatable; bundled names or .txt paths) and ``--banned "a,b"``."""
    parser.add_argument("--wordlist", action="append", default=None, metavar="NAME[,NAME…]",
                        help=f"word lists: bundled names or .txt files (default: {','.join(default)})")
    parser.add_argument("--banned", dest="banned_terms", action="append", default=[], metavar='"a,b"',
                        help="extra banned terms, comma-separated (repeatable; default: none); re:PATTERN is a "
                             "regex term and takes the rest of the value, commas included")
    parser.add_argument("--obfuscation", default=DEFAULT_OBFUSCATION, type=obfuscation_option,
                        metavar="LEVEL[+markup]",
                        help="obfuscated forms that match too, for lists without their own level: off | homoglyphs "
                        "| leet | spaced | masked, optionally +markup (docs/matching.md)")
    parser.set_defaults(default_wordlists=list(default))


def selected_wordlists(args: argparse.Namespace):
    from guardrail.wordlists.selection import select_wordlists

    names = args.wordlist if args.wordlist is not None else args.default_wordlists
    return with_obfuscation(select_wordlists(names, args.banned_terms), args.obfuscation)
