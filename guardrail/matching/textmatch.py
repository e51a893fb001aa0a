"""The matching contract on text: scan a string for banned terms (pyahocorasick over normalised text).

This is the definition the decoder's automaton must agree with (tests compare the two), the engine of
``POST /v1/check`` and ``guardrail check``, and the verifier the leak tests use on every streamed prefix.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import ahocorasick

from guardrail.matching.normalize import is_word_char, normalize_with_offsets
from guardrail.matching.term_spec import TermSpec, flatten
from guardrail.wordlists.wordlist import MatchMode, WordList


@dataclass(frozen=True)
class TextMatch:
    """A banned term found in a text; ``start``/``end`` index the original text (end exclusive)."""

    term: str
    list_name: str
    start: int
    end: int


def _automaton(keys: dict) -> ahocorasick.Automaton | None:
    if not keys:
        return None
    automaton = ahocorasick.Automaton()
    for key, value in keys.items():
        automaton.add_word(key, value)
    automaton.make_automaton()
    return automaton


def boundary_ok(norm: str, start: int, end: int, pattern: str, match: MatchMode) -> bool:
    """Whether an occurrence ``norm[start:end] == pattern`` satisfies its match mode.

    ``word``: not preceded by a word character when the term starts with one, not followed by a word
    character when it ends with one (``(?<!\\w)`` / ``(?!\\w)``, text edges count as non-word);
    ``prefix``: only the left condition; ``substring``: none.
    """
    if match is MatchMode.SUBSTRING:
        return True
    if is_word_char(pattern[0]) and start > 0 and is_word_char(norm[start - 1]):
        return False
    if match is MatchMode.WORD and is_word_char(pattern[-1]) and end < len(norm) and is_word_char(norm[end]):
        return False
    return True


class TextMatcher:
    """Find every occurrence of the terms of ``wordlists`` in a text.

    Args:
        wordlists: the lists to match; terms normalised as in :mod:`guardrail.matching.normalize`.

    Example:
        >>> from guardrail.wordlists.wordlist import wordlist_from_terms
        >>> TextMatcher([wordlist_from_terms(["fuck you"])]).scan("well FUCK\\n you")
        [TextMatch(term='fuck you', list_name='request', start=5, end=15)]
    """

    def __init__(self, wordlists: Sequence[WordList]):
        self.terms, self.allows = flatten(wordlists)
        self._modes: list[tuple[bool, ahocorasick.Automaton, ahocorasick.Automaton | None]] = []
        for case_sensitive in (False, True):
            keys: dict[str, list[TermSpec]] = {}
            for spec in self.terms:
                if spec.case_sensitive == case_sensitive:
                    keys.setdefault(spec.normalized, []).append(spec)
            allow_keys = {a.normalized: a.normalized for a in self.allows if a.case_sensitive == case_sensitive}
            terms = _automaton(keys)
            if terms is not None:
                self._modes.append((case_sensitive, terms, _automaton(allow_keys)))

    def scan(self, text: str) -> list[TextMatch]:
        """All matches in ``text``, overlapping ones included, sorted by (start, end, term)."""
        found: list[TextMatch] = []
        for case_sensitive, terms, allows in self._modes:
            norm, offsets = normalize_with_offsets(text, case_sensitive)
            allowed = [] if allows is None else [(last + 1 - len(key), last + 1) for last, key in allows.iter(norm)]
            for last, specs in terms.iter(norm):
                end = last + 1
                start = end - len(specs[0].normalized)
                for spec in specs:
                    if not boundary_ok(norm, start, end, spec.normalized, spec.match):
                        continue
                    if spec.match is MatchMode.SUBSTRING and any(a <= start and end <= b for a, b in allowed):
                        continue
                    found.append(TextMatch(spec.text, spec.list_name, offsets[start], offsets[end - 1] + 1))
        return sorted(set(found), key=lambda m: (m.start, m.end, m.term, m.list_name))

    def __bool__(self) -> bool:
        return bool(self.terms)
