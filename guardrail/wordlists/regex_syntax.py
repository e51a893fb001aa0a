"""Regular-expression terms: their syntax, and the subset of it the token automaton can compile.

A regex term is written ``re:PATTERN`` in a word list (docs/wordlists.md) or built as
``Term(pattern, match, regex=True)``. The pattern is Python ``re`` syntax, parsed here with the standard
library's own parser (``re._parser``, the module behind ``re.compile``): the syntax is then exactly the one
the reference text matcher runs with ``re``, escapes, classes and inline flags included, with no second
grammar to keep in step. The parser is private API, but its parse tree (``(opcode, argument)`` pairs) has
kept its shape since Python 2; Python 3.11 renamed the module from ``sre_parse`` and added the atomic and
possessive opcodes, which are refused below. ``requires-python >= 3.11`` (pyproject.toml) fixes the name.

The supported subset is what a finite automaton over a text stream can decide while knowing where each
match began (docs/matching.md, "Regex terms"): literals, ``.``, classes ``[...]`` with ranges and ``\\w \\d
\\s`` (and their negations), groups, alternation, bounded repetition ``{m,n}`` / ``?`` (greedy or lazy: the
same set of matches), word boundaries ``\\b`` and ``\\B``, and the inline flags ``(?x)`` ``(?s)`` ``(?m)``
``(?u)``. Refused, with a :class:`RegexError` naming the construct: back-references, look-ahead and
look-behind, conditional groups, atomic groups, possessive quantifiers, anchors, unbounded repetition
(``*``, ``+``, ``{m,}``), the flags ``(?i)`` ``(?a)`` ``(?L)``, patterns that can match the empty string
and patterns whose matches can be longer than :data:`MAX_REGEX_SPAN` characters.

Pure syntax: the meaning over normalised text (case folding of literals and classes) and the automaton
limits are checked by ``guardrail.matching.regex.term`` when a list is compiled.

Why not a maintained parser from PyPI (issue 19; evaluated on the patterns the tests and docs accept): the
contract is ``re``'s syntax *and meaning* — the reference text matcher runs ``re`` itself
(tests/test_regex_terms.py checks the token automaton against it), and the matching layer
(``regex_term``, ``regex_nfa``, ``regex_tokens``) reads this tree. The candidates parse other dialects:

- ``interegular`` 0.3.3 (used by outlines and lark): of 30 patterns this module accepts it refuses 9 —
  ``\\b`` and ``\\B`` ("Escape \\b is not implemented"), the flags ``(?x)`` ``(?u)`` ``(?m)``, the escapes
  ``\\uXXXX`` ``\\UXXXXXXXX`` ``\\N{...}``, and a ``(?#...)`` comment (AttributeError) — and its ``\\w \\d
  \\s`` are ASCII where ``re``'s are Unicode (``\\w`` does not match ``é`` or ``傻``, ``\\d`` not ``٣``,
  ``\\s`` not U+2003), so every class shorthand would mean something else;
- ``greenery`` 4.2.3: no ``\\b``, ``(?x)``, ``(?#...)`` or ``\\u`` escapes; ASCII ``\\w \\d \\s``;
- ``regex``: no public parser (its ``_regex_core`` is as private as ``re._parser``), and a syntax of its own
  (nested sets, ``\\p{...}``);
- ``sre_yield``, ``exrex``, Hypothesis' ``from_regex`` and lark itself (``lark.utils``, for regex widths)
  parse with ``re._parser`` too: it is what the maintained projects use for Python's syntax.

A port would drop word boundaries and Unicode classes from the documented term syntax (docs/wordlists.md),
or re-create ``re``'s semantics over another tree: the second grammar this module exists to avoid. The
private-API risk is kept small instead: the import is here (the matching layer takes the opcode constants
from ``re._constants``), ``requires-python >= 3.11`` fixes the module name, and
``tests/test_regex_terms.py`` pins the tree shapes the layer reads, so a Python release that changes them
fails the suite, not the guard.
"""

from __future__ import annotations

import functools
import re
import warnings
from re import _constants as sre  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]

__all__ = [
    "MAX_REGEX_SPAN",
    "REGEX_PREFIX",
    "RegexError",
    "match_lengths",
    "parse_regex",
]

#: Written before a pattern in a list file or a request term: ``re:s[o0]rry``. ``\\re:`` is the literal text.
REGEX_PREFIX = "re:"

#: Longest match (in normalised characters) a regex term may have. A match that is still in progress
#: can have begun this many characters back, so the guard holds back up to this much streamed text
#: (docs/design.md §6) and the automaton tracks a match start per offset up to it; unbounded
#: repetition would make both infinite. 128 is half the plain-term limit (MAX_TERM_CHARS = 256, which
#: bounds a plain term's hold-back the same way) and leaves room for phrases with optional words.
MAX_REGEX_SPAN = 128

#: Inline flags that would change what a pattern means under the text contract: flag -> (as written, why).
_REFUSED_FLAGS = {
    re.IGNORECASE: ("(?i)", "use the term's case option instead (case=insensitive is the default)"),
    re.ASCII: ("(?a)", "\\w, \\d, \\s and \\b follow the Unicode rules of the text contract"),
    re.LOCALE: ("(?L)", "locale-dependent matching is not supported"),
}

_ANCHORS = {
    sre.AT_BEGINNING: "^", sre.AT_BEGINNING_STRING: "\\A", sre.AT_END: "$", sre.AT_END_STRING: "\\Z",
}


class RegexError(ValueError):
    """A pattern that is not valid Python ``re`` syntax or lies outside the supported subset.

    Attributes:
        construct: short name of what was refused (``"look-ahead (?=...)"``, ``"unbounded repetition"``,
            ``"syntax"``, ``"empty match"``, ``"span"``, ...), for tests and API clients.
        reason: the whole explanation (also ``str(error)``).
    """

    def __init__(self, construct: str, reason: str) -> None:
        super().__init__(reason)
        self.construct = construct
        self.reason = reason


def parse_regex(pattern: str) -> list[tuple]:
    """Parse ``pattern`` and check it is in the supported subset (memoised: a pattern is parsed when its
    list is read, rewritten, compiled and indexed; callers must not change the tree).

    Returns:
        the parse tree: a list of ``(opcode, argument)`` items of ``re._parser`` (opcodes from
        ``re._constants``), as :func:`match_lengths` and the matching layer read it.

    Raises:
        RegexError: invalid syntax (with the position), an unsupported construct or flag, a pattern that
            can match the empty string, or matches longer than :data:`MAX_REGEX_SPAN` characters.
    """
    return _parse(pattern)


@functools.lru_cache(maxsize=4096)
def _parse(pattern: str) -> list[tuple]:
    with warnings.catch_warnings():
        # "Possible nested set" FutureWarnings are about future syntax; the pattern means what it means today.
        warnings.simplefilter("ignore")
        try:
            tree = sre_parse.parse(pattern)
        except re.error as exc:
            where = f" at position {exc.pos}" if exc.pos is not None else ""
            raise RegexError("syntax", f"invalid regular expression: {exc.msg}{where}") from None
        except (ValueError, OverflowError, RecursionError) as exc:  # not re.error, but the same: a bad pattern
            raise RegexError("syntax", f"invalid regular expression: {exc}") from None
    for flag, (written, why) in _REFUSED_FLAGS.items():
        if tree.state.flags & flag:
            raise RegexError(f"inline flag {written}", f"the inline flag {written} is not supported: {why}")
    items = list(tree)
    _check(items)
    shortest, longest = match_lengths(items)
    if shortest == 0:
        raise RegexError("empty match", "the pattern can match the empty string; every match must hold "
                         "at least one character")
    if longest > MAX_REGEX_SPAN:
        raise RegexError("span", f"a match can be {longest} characters long; the limit is {MAX_REGEX_SPAN} "
                         "(bound the repetitions: a match in progress is held back from the stream)")
    return items


def _check(items: list[tuple]) -> None:
    """Raise :class:`RegexError` for the first construct outside the supported subset (depth first)."""
    for op, av in items:
        if op in (sre.LITERAL, sre.NOT_LITERAL, sre.ANY, sre.IN):
            continue
        if op is sre.BRANCH:
            for alternative in av[1]:
                _check(list(alternative))
        elif op is sre.SUBPATTERN:
            _group, add_flags, del_flags, sub = av
            for flag, (written, why) in _REFUSED_FLAGS.items():
                if (add_flags | del_flags) & flag:
                    raise RegexError(f"inline flag {written}", f"the inline flag {written} is not supported: {why}")
            _check(list(sub))
        elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT):
            low, high, sub = av
            if high is sre.MAXREPEAT:
                raise RegexError("unbounded repetition", _unbounded(low))
            _check(list(sub))
        elif op is sre.AT:
            if av in (sre.AT_BOUNDARY, sre.AT_NON_BOUNDARY):
                continue
            anchor = _ANCHORS.get(av, str(av))
            raise RegexError(f"anchor {anchor}", f"the anchor {anchor} is not supported: a term matches anywhere "
                             "in the text (use \\b, or the match mode word/prefix/substring)")
        elif op is sre.GROUPREF:
            raise RegexError("back-reference", f"the back-reference to group {av} (\\{av} or (?P=name)) is not "
                             "supported: a finite automaton cannot compare with earlier text")
        elif op is sre.GROUPREF_EXISTS:
            raise RegexError("conditional group", "the conditional group (?(group)yes|no) is not supported")
        elif op in (sre.ASSERT, sre.ASSERT_NOT):
            direction, _sub = av
            kind = ("look-ahead " if direction == 1 else "look-behind ") + {
                (sre.ASSERT, 1): "(?=...)", (sre.ASSERT_NOT, 1): "(?!...)",
                (sre.ASSERT, -1): "(?<=...)", (sre.ASSERT_NOT, -1): "(?<!...)"}[op, direction]
            raise RegexError(kind, f"the {kind} is not supported (look-around): use \\b or \\B, or the term's "
                             "match mode (word/prefix/substring) for what may stand around a match")
        elif op is sre.ATOMIC_GROUP:
            raise RegexError("atomic group", "the atomic group (?>...) is not supported")
        elif op is sre.POSSESSIVE_REPEAT:
            raise RegexError("possessive quantifier", "possessive quantifiers (*+, ++, ?+, {m,n}+) are not "
                             "supported")
        else:
            raise RegexError(str(op), f"the construct {op} is not supported")


def _unbounded(low: int) -> str:
    written = {0: "*", 1: "+"}.get(low, f"{{{low},}}")
    suggestion = f"{{{low},N}}" if low > 1 else ("{1,N}" if low else "{0,N}")
    return (f"unbounded repetition ({written}) is not supported (nor are *, + and {{m,}}): a match could begin "
            f"arbitrarily far back, so no streamed text could ever be released; write a bound such as "
            f"{suggestion}, for a whole match of at most {MAX_REGEX_SPAN} characters")


def match_lengths(items: list[tuple]) -> tuple[int, int]:
    """``(shortest, longest)`` number of characters a match of the parse tree ``items`` can have.

    Assertions (``\\b``, ``\\B``) have length 0. Only defined on trees :func:`parse_regex` accepts (no
    unbounded repetition).
    """
    shortest = longest = 0
    for op, av in items:
        if op in (sre.LITERAL, sre.NOT_LITERAL, sre.ANY, sre.IN):
            shortest, longest = shortest + 1, longest + 1
        elif op is sre.BRANCH:
            lengths = [match_lengths(list(alternative)) for alternative in av[1]]
            shortest += min(low for low, _ in lengths)
            longest += max(high for _, high in lengths)
        elif op is sre.SUBPATTERN:
            low, high = match_lengths(list(av[3]))
            shortest, longest = shortest + low, longest + high
        elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT):
            low, high = match_lengths(list(av[2]))
            shortest, longest = shortest + av[0] * low, longest + av[1] * high
    return shortest, longest
