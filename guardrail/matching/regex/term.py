"""What a regex term means under the text contract: its pattern rewritten over normalised text.

The contract is on normalised text (docs/design.md §3): NFKC, case folding unless case-sensitive, zero-width
characters dropped, whitespace runs made one space. A regex term ``re:PATTERN`` matches where the
**rewritten pattern** :func:`normalize_pattern` matches the normalised text under the term's match mode
(:func:`reference_pattern`). The rewrite normalises what the pattern spells out, the way a plain term's
text is normalised, so that ``re:Fuck`` bans what the plain term ``Fuck`` bans:

* a literal character becomes its normalised form (``fold_char``: ``A`` -> ``a`` unless case-sensitive,
  ``ß`` -> ``ss``, ``ｆ`` -> ``f``, a zero-width character -> nothing, a tab -> a space); a run of
  literal spaces becomes one space (the text never holds two);
* a class member becomes its normalised form, which must be one character (``[A-Z]`` -> ``[a-z]``;
  ``[ß]`` is refused, write ``(?:ss|...)``); a range stands for the normalised forms of its members that
  normalise to one character (``[À-ÿ]`` leaves out ``ß``, which normalised text spells ``ss``); negation
  applies after folding (``[^A-Z]`` -> ``[^a-z]``: no letter a-z in any case);
* ``\\w \\d \\s \\W \\D \\S .`` keep Python's meaning over the normalised text (``\\s`` then only meets
  ``" "``), as do ``\\b`` and ``\\B`` (word characters are the contract's: ``str.isalnum()`` or ``_``).

The match modes generalise those of plain terms: a match may not begin or end inside a word, i.e. the
*edge* assertion ``(?:(?<!\\w)|(?!\\w))`` (not a word character on both sides) holds at both ends (``word``)
or at the start (``prefix``); ``substring`` has none. For a pattern with one spelling this is exactly the
plain-term rule (a boundary only where the term's edge character is a word character).

:func:`reference_pattern` is the definition in Python ``re`` syntax; the tests run it with ``re`` as the
oracle (``tests/helpers/regex_oracle.py``) for the text matcher and the token automaton, which both run the
character-level DFA of :mod:`guardrail.matching.regex.automaton` (linear time; see
:mod:`guardrail.matching.textmatch` on why not ``re`` itself).
"""

from __future__ import annotations

import re
from re import _constants as sre  # type: ignore[attr-defined]

from guardrail.matching.normalize import fold_char
from guardrail.wordlists.regex_syntax import RegexError, parse_regex
from guardrail.wordlists.wordlist import MatchMode

#: Code points a pattern's class ranges may span in all (each is normalised one by one when the pattern
#: is rewritten: ~0.3 us each, so the bound keeps a rewrite under ~30 ms). Wider sets are written with
#: ``.``, ``\\w`` or a negated class, which need no enumeration.
MAX_CLASS_RANGE_CODE_POINTS = 65_536

#: "Not inside a word": not a word character on both sides of the position (see the module docstring).
EDGE = r"(?:(?<!\w)|(?!\w))"

_CATEGORY_ESCAPES = {
    sre.CATEGORY_WORD: r"\w", sre.CATEGORY_NOT_WORD: r"\W", sre.CATEGORY_DIGIT: r"\d",
    sre.CATEGORY_NOT_DIGIT: r"\D", sre.CATEGORY_SPACE: r"\s", sre.CATEGORY_NOT_SPACE: r"\S",
}
_fold_uncached = fold_char.__wrapped__  # ranges would flush the per-character cache the decoder relies on


def normalize_pattern(pattern: str, case_sensitive: bool) -> str:
    """The pattern of a regex term over normalised text (Python ``re`` syntax; see the module docstring).

    Args:
        pattern: the term's pattern as written (without ``re:``).
        case_sensitive: the term's case rule; when ``False`` literals and class members are case-folded.

    Returns:
        a pattern made of literals, ``.``, classes, non-capturing groups, alternation, ``{m,n}``, ``\\b``
        and ``\\B`` only.

    Raises:
        RegexError: the pattern is outside the supported subset (:func:`~guardrail.wordlists.regex_syntax.parse_regex`),
            a class member does not normalise to one character, a class is empty after normalisation, class
            ranges span more than :data:`MAX_CLASS_RANGE_CODE_POINTS`, or the rewritten pattern can match
            the empty string or more than ``MAX_REGEX_SPAN`` characters.
    """
    budget = [MAX_CLASS_RANGE_CODE_POINTS]
    rewritten = _sequence(parse_regex(pattern), case_sensitive, budget)
    parse_regex(rewritten)  # folding changes lengths (ß -> ss, a zero-width literal -> nothing): check again
    return rewritten


def _sequence(items: list[tuple], case_sensitive: bool, budget: list[int]) -> str:
    out: list[str] = []
    after_space = False  # the last item written was a literal ending in a space: collapse the next one's
    for op, av in items:
        if op is sre.LITERAL:
            folded = re.sub(" {2,}", " ", fold_char(chr(av), case_sensitive))
            if after_space and folded.startswith(" "):
                folded = folded[1:]
            if folded:
                out.append(re.escape(folded))
                after_space = folded.endswith(" ")
            continue
        after_space = False
        if op is sre.NOT_LITERAL:
            out.append("[^" + _member(_single(av, case_sensitive, "[^...]")) + "]")
        elif op is sre.ANY:
            out.append(".")
        elif op is sre.IN:
            out.append(_charclass(av, case_sensitive, budget))
        elif op is sre.BRANCH:
            out.append("(?:" + "|".join(_sequence(list(alt), case_sensitive, budget) for alt in av[1]) + ")")
        elif op is sre.SUBPATTERN:
            out.append("(?:" + _sequence(list(av[3]), case_sensitive, budget) + ")")
        elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT):
            low, high, sub = av
            out.append(f"(?:{_sequence(list(sub), case_sensitive, budget)}){{{low},{high}}}")
        elif op is sre.AT:
            out.append(r"\b" if av is sre.AT_BOUNDARY else r"\B")
        else:  # parse_regex refused everything else
            raise RegexError(str(op), f"the construct {op} is not supported")
    return "".join(out)


def _single(point: int, case_sensitive: bool, where: str) -> int:
    """The normalised form of a class member, which must be one character."""
    folded = fold_char(chr(point), case_sensitive)
    if len(folded) != 1:
        shown = "nothing" if not folded else f"{folded!r} ({len(folded)} characters)"
        raise RegexError("class member", f"the class member {chr(point)!r} in {where} normalises to {shown}, "
                         f"which cannot stand at one position of the normalised text; write it outside the "
                         f"class, e.g. (?:{re.escape(folded) or '...'}|...)")
    return ord(folded)


def _charclass(items: list[tuple], case_sensitive: bool, budget: list[int]) -> str:
    negate = bool(items) and items[0][0] is sre.NEGATE
    points: set[int] = set()
    categories: list[str] = []
    for op, av in items:
        if op is sre.LITERAL:
            points.add(_single(av, case_sensitive, "[...]"))
        elif op is sre.RANGE:
            low, high = av
            budget[0] -= high - low + 1
            if budget[0] < 0:
                raise RegexError("class range", f"class ranges span more than {MAX_CLASS_RANGE_CODE_POINTS} code "
                                 "points; write wide sets with ., \\w or a negated class [^...]")
            for point in range(low, high + 1):
                folded = _fold_uncached(chr(point), case_sensitive)
                if len(folded) == 1:
                    points.add(ord(folded))
        elif op is sre.CATEGORY:
            categories.append(_CATEGORY_ESCAPES[av])
    if not points and not categories:
        raise RegexError("empty class", "a character class holds no character of normalised text "
                         "(its members all normalise to several characters or to nothing)")
    body = []
    ordered = sorted(points)
    if ordered:
        start = prev = ordered[0]
        for point in ordered[1:] + [-1]:  # -1 closes the last run
            if point != prev + 1:
                body.append(_member(start) if start == prev else f"{_member(start)}-{_member(prev)}")
                start = point
            prev = point
    return "[" + ("^" if negate else "") + "".join(body) + "".join(categories) + "]"


def _member(point: int) -> str:
    """A code point written safely inside a class (letters and digits as themselves, the rest escaped)."""
    char = chr(point)
    if char.isascii() and char.isalnum():
        return char
    return f"\\u{point:04x}" if point <= 0xFFFF else f"\\U{point:08x}"


def reference_pattern(normalized: str, match: MatchMode) -> str:
    """The rewritten pattern under ``match`` (Python ``re`` over normalised text): ``word`` and ``prefix``
    put :data:`EDGE` at both ends or at the start."""
    if match is MatchMode.WORD:
        return f"{EDGE}(?:{normalized}){EDGE}"
    if match is MatchMode.PREFIX:
        return f"{EDGE}(?:{normalized})"
    return f"(?:{normalized})"
