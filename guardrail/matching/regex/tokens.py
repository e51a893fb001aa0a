"""Which tokens can complete a regex match: the mask primitive's candidates for regex streams.

:meth:`guardrail.matching.artefact.Artefact.completing_tokens` must be exactly the tokens whose transition
completes a match, without sweeping the vocab. For an Aho–Corasick stream it looks up the rest of each
pattern by prefix; a regex has no single rest, so for its streams:

* a match that **began before the token** (or waits on its first character): :func:`continuing_tokens`
  walks the vocab's normalised token texts in sorted order — a trie walked without building it — stepping
  the DFA from the current node, and prunes a branch as soon as no thread that began before the token is
  alive (``depth[node]`` no larger than the characters read). The tokens under a branch where such a
  match is reported are exactly those that complete it: taken as they are;
* a match that **begins inside the token**: it lies inside the token's text, so the token's text holds a
  character every match of the term must hold. :func:`inside_candidates` reads the pattern for such
  *required* pieces (literal runs and single-position classes outside optional parts, one per
  alternative) and looks up the rarest in the per-vocab token-text index. A superset, verified by the
  artefact with exact transitions.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from re import _constants as sre  # type: ignore[attr-defined]

import numpy as np

from guardrail.matching.normalize import is_word_char
from guardrail.matching.regex.automaton import RegexAutomaton
from guardrail.matching.regex.nfa import charset_of
from guardrail.matching.token_text import TokenTextIndex, token_intersection, token_set
from guardrail.wordlists.regex_syntax import parse_regex

#: The character a byte sequence left unfinished by earlier tokens decodes to when the next token does not
#: continue it (``bytes.decode(errors="replace")``): it comes first in that token's text.
REPLACEMENT = "\ufffd"


def continuing_tokens(automaton: RegexAutomaton, node: int, previous_space: bool, index: TokenTextIndex,
                      after_unfinished: bool = False) -> np.ndarray | None:
    """``int64[k]`` sorted ids of the tokens whose text, read from ``node``, reports a match of this stream
    that began before the token's text (see the module docstring).

    Args:
        automaton: the stream's DFA.
        node: the stream's node (``StreamState.node``).
        previous_space: the text so far ends in a space (a token's leading space is then collapsed).
        index: the vocab's token-text index.
        after_unfinished: the text so far ends inside a UTF-8 character: a token that does not continue it
            begins with :data:`REPLACEMENT`. The result then covers those tokens only (the caller checks
            the ones that begin with a continuation byte).

    Returns:
        the ids, or ``None`` when every token that does not continue the character completes a match at
        its replacement character (the caller then checks every token).
    """
    if after_unfinished:
        if automaton.later_max[node][False] > 0:
            return None
        node = automaton.step(node, REPLACEMENT)
        if automaton.now_max[node] > 0:
            return None
        previous_space = False
    if not automaton.depth[node] and not any(automaton.later_max[node]):
        return np.empty(0, dtype=np.int64)  # nothing in progress: the common case, no walk
    texts, ids = index.sorted_texts(automaton.case_sensitive)
    found: list[tuple[int, int]] = []
    _walk(automaton, texts, 0, len(texts), 0, 0, node, previous_space, found)
    return token_set(*(ids[lo:hi] for lo, hi in found))


def _walk(automaton: RegexAutomaton, texts: Sequence[str], lo: int, hi: int, depth: int, emitted: int, node: int,
          skip_space: bool, found: list[tuple[int, int]]) -> None:
    """Visit ``texts[lo:hi]`` (sorted, sharing their first ``depth`` characters, which took the stream to
    ``node`` emitting ``emitted`` symbols); append the index ranges of the texts that complete a match
    begun before them."""
    at = lo
    while at < hi and len(texts[at]) == depth:  # texts that end here (sorted first)
        at += 1
    while at < hi:
        char = texts[at][depth]
        stop = hi if ord(char) == 0x10FFFF else bisect.bisect_left(
            texts, texts[at][:depth] + chr(ord(char) + 1), at, hi)
        if skip_space and char == " ":  # collapsed into the space the text so far ends with
            _walk(automaton, texts, at, stop, depth + 1, emitted, node, False, found)
        elif automaton.later_max[node][is_word_char(char)] > emitted:
            found.append((at, stop))
        else:
            after = automaton.step(node, char)
            if automaton.now_max[after] > emitted + 1:
                found.append((at, stop))
            elif automaton.depth[after] > emitted + 1:
                _walk(automaton, texts, at, stop, depth + 1, emitted + 1, after, False, found)
        at = stop


def inside_candidates(patterns: Sequence[str], index: TokenTextIndex, case_sensitive: bool) -> np.ndarray:
    """``int64[k]`` sorted: a superset of the tokens whose text holds a whole match of one of ``patterns``
    (rewritten patterns of one case mode), found in ``index``."""
    parts = []
    for pattern in patterns:
        need = ("all", _required(parse_regex(pattern)))
        found = _tokens(need, index, case_sensitive)
        if found is None:
            return np.arange(index.size, dtype=np.int64)
        parts.append(found)
    return token_set(*parts)


def _required(items: list[tuple]) -> list[tuple]:
    """What every match of the parse tree ``items`` holds: ``("lit", text)`` for a run of literals,
    ``("set", charset)`` for one position, ``("all", [...])`` / ``("any", [...])`` for groups and
    alternations. Optional parts (``{0,n}``) and assertions require nothing."""
    need: list[tuple] = []
    run: list[str] = []
    for op, av in items:
        if op is sre.LITERAL:
            run.append(chr(av))
            continue
        if run:
            need.append(("lit", "".join(run)))
            run = []
        if op in (sre.NOT_LITERAL, sre.ANY, sre.IN):
            need.append(("set", charset_of(op, av)))
        elif op is sre.BRANCH:
            need.append(("any", [("all", _required(list(alternative))) for alternative in av[1]]))
        elif op is sre.SUBPATTERN:
            need.append(("all", _required(list(av[3]))))
        elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT) and av[0] >= 1:
            need.append(("all", _required(list(av[2]))))
    if run:
        need.append(("lit", "".join(run)))
    return need


def _estimate(need: tuple, index: TokenTextIndex, case_sensitive: bool) -> int:
    """An upper bound of the tokens :func:`_tokens` would return (cheap: no verification)."""
    kind, arg = need
    if kind == "lit":
        return index.count_containing(arg, case_sensitive)
    if kind == "set":
        return index.count_containing_any(arg.ranges, case_sensitive)
    estimates = [_estimate(child, index, case_sensitive) for child in arg]
    if kind == "all":
        return min(estimates, default=index.size)
    return min(sum(estimates), index.size)


#: A required piece is intersected with the candidates so far only while its estimate is at most this many
#: times their number: looking it up costs about its size, checking a candidate about 10 us.
_INTERSECT_RATIO = 20


def _tokens(need: tuple, index: TokenTextIndex, case_sensitive: bool) -> np.ndarray | None:
    """The tokens holding ``need`` (``None``: any token may). For a sequence, the tokens holding its rarest
    pieces (a token holding a whole match holds every piece)."""
    kind, arg = need
    if kind == "lit":
        return index.containing(arg, case_sensitive)
    if kind == "set":
        return index.containing_any(arg.ranges, case_sensitive)
    if kind == "all":
        found: np.ndarray | None = None
        for estimate, _, child in sorted((_estimate(child, index, case_sensitive), at, child)
                                         for at, child in enumerate(arg))[:3]:
            if found is not None and estimate > _INTERSECT_RATIO * max(len(found), 1):
                break
            tokens = _tokens(child, index, case_sensitive)
            if tokens is not None:
                found = tokens if found is None else token_intersection(found, tokens)
        return found
    parts = [_tokens(child, index, case_sensitive) for child in arg]
    if any(part is None for part in parts):
        return None
    return token_set(*(part for part in parts if part is not None))
