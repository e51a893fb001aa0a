"""The test oracle for regex terms: Python's ``re`` over normalised text, independent of the DFA.

The contract (docs/matching.md, "Regex terms") is the rewritten pattern under the match mode
(``regex_term.reference_pattern``) run by Python's ``re`` over the normalised text. The text matcher and the
token automaton both run the character-level DFA; these helpers run ``re`` instead, so that the tests
compare two independent implementations, as they do for plain terms (pyahocorasick vs the automaton). They
backtrack, so they are for the tests' short texts and small patterns only.

Both report what the automaton reports: per end position, the earliest start of a match ending there.
:func:`patterns` draws random patterns of the supported subset (hypothesis).
"""

from __future__ import annotations

import re

from hypothesis import strategies as st

from guardrail.matching.normalize import normalize
from guardrail.matching.regex.term import reference_pattern
from guardrail.wordlists.regex_syntax import match_lengths, parse_regex
from guardrail.wordlists.wordlist import MatchMode


class ReferenceRegex:
    """One regex term under ``re``: pins each candidate end with the one character of right context that
    ``\\b``, ``\\B`` and the edge assertions read (a slice that keeps it, ``(?=.\\Z)``), or ``\\Z`` where the
    text ends (``endpos`` would hide the context).

    Args:
        normalized: the rewritten pattern (``TermSpec.normalized``).
        match: the term's match mode.
    """

    def __init__(self, normalized: str, match: MatchMode):
        wrapped = reference_pattern(normalized, match)
        self.span = match_lengths(parse_regex(normalized))[1]
        self._any = re.compile(wrapped)
        self._before_last = re.compile(f"(?:{wrapped})(?=.\\Z)", re.S)
        self._at_end = re.compile(f"(?:{wrapped})\\Z", re.S)

    def spans(self, norm: str) -> list[tuple[int, int]]:
        """``(start, end)`` per end position with a match, from the earliest start; sorted by end."""
        earliest: dict[int, int] = {}
        found = self._any.search(norm)
        while found is not None:
            start = found.start()  # the leftmost position from which some match begins
            left = max(start - 1, 0)
            for end in range(start + 1, min(start + self.span, len(norm)) + 1):
                if end in earliest:
                    continue
                if end < len(norm):
                    hit = self._before_last.match(norm[left:end + 1], start - left)
                else:
                    hit = self._at_end.match(norm[left:], start - left)
                if hit is not None:
                    earliest[end] = start
            found = self._any.search(norm, start + 1)
        return sorted(((s, e) for e, s in earliest.items()), key=lambda span: span[1])


def brute_force(normalized: str, match: MatchMode, norm: str) -> list[tuple[int, int]]:
    """As :meth:`ReferenceRegex.spans`, by another route: every (start, end) pair, the end pinned with a
    lookahead over the whole text (``(?=.{k}\\Z)``)."""
    wrapped = reference_pattern(normalized, match)
    earliest = {}
    for end in range(1, len(norm) + 1):
        pinned = re.compile(f"(?:{wrapped})(?=.{{{len(norm) - end}}}\\Z)", re.S)
        for start in range(end):
            if pinned.match(norm, start):
                earliest[end] = start
                break
    return sorted(((s, e) for e, s in earliest.items()), key=lambda span: span[1])


def oracle_matches(terms, text: str) -> set[tuple[str, int, int]]:
    """``(term text, start, end)`` in normalised-text coordinates of every regex term among ``terms``
    (``TermSpec``\\ s), per its case rule."""
    found = set()
    for spec in terms:
        if spec.regex:
            norm = normalize(text, spec.case_sensitive)
            found |= {(spec.text, s, e) for s, e in ReferenceRegex(spec.normalized, spec.match).spans(norm)}
    return found


# -- random patterns ---------------------------------------------------------------------------

ATOMS = ["a", "b", "A", "é", "ß", " ", "-", "1", "[ab]", "[^a]", "[A-C]", "\\w", "\\W", "\\d", "\\s", ".", "\\b", "\\B"]


@st.composite
def patterns(draw, depth=0):
    """Random patterns of the supported subset (may be refused: empty matches)."""
    parts = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.integers(0, 5 if depth < 2 else 2))
        if kind <= 2:
            parts.append(draw(st.sampled_from(ATOMS)))
        elif kind == 3:
            parts.append("(?:" + "|".join(draw(st.lists(patterns(depth + 1), min_size=2, max_size=3))) + ")")
        else:
            low = draw(st.integers(0, 2))
            parts.append(f"(?:{draw(patterns(depth + 1))}){{{low},{low + draw(st.integers(0, 2))}}}")
    return "".join(parts)
