"""The matching contract on text: scan a string for banned terms (pyahocorasick over normalised text).

This is the definition the decoder's automaton must agree with (tests compare the two), the engine of
``POST /v1/check`` and ``guardrail check``, and the verifier the leak tests use on every streamed prefix.

Regex terms are matched by their character-level DFA (:meth:`RegexAutomaton.scan`), in linear time: a
backtracking engine such as Python's ``re`` is exponential on some bounded patterns (``(?:a{1,2}){1,25}b``
takes ~55 s on 60 ``a``), which a ``/v1/check`` request could trigger with its own terms. Python's ``re``
over the normalised text is the definition (:func:`guardrail.matching.regex.term.reference_pattern`), and the
tests check this matcher and the token automaton against it (``tests/helpers/regex_oracle.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import ahocorasick

from guardrail.matching.normalize import is_word_char, normalize_with_offsets
from guardrail.matching.obfuscation import DEFAULT_OBFUSCATION, Obfuscation, ObfuscationLevel
from guardrail.matching.obfuscation.automaton import ObfuscationAutomaton, compile_obfuscation_stream
from guardrail.matching.obfuscation.nfa import ObfuscatedTerm
from guardrail.matching.regex.automaton import RegexAutomaton, compile_regex_stream
from guardrail.matching.term_spec import TermSpec, flatten
from guardrail.wordlists.regex_syntax import RegexError
from guardrail.wordlists.wordlist import MatchMode, WordList, with_obfuscation


@dataclass(frozen=True)
class TextMatch:
    """A banned term found in a text; ``start``/``end`` index the original text (end exclusive).

    ``term`` is the term as written (a regex term with its ``re:`` prefix). A regex term is reported once
    per position where one of its matches ends, from the earliest start of a match ending there (the
    start the decoder rolls back to)."""

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


#: DFA nodes a private obfuscation automaton (``shared=False``) may grow to before :meth:`TextMatcher.scan`
#: starts it afresh: ~1.2 KB a node (measured on random text), so ~60 MB per view. Prose visits a few thousand
#: nodes; random text of 1M characters (the ``/v1/check`` limit) builds ~60,000 (docs/matching.md, "Untrusted
#: text").
PRIVATE_NODE_LIMIT = 50_000


class TextMatcher:
    """Find every occurrence of the terms of ``wordlists`` in a text.

    Args:
        wordlists: the lists to match; terms normalised as in :mod:`guardrail.matching.normalize`.
        obfuscation: the obfuscation level of the lists that set none (``DEFAULT_OBFUSCATION`` unless named,
            as on every path; ``OFF`` for the literal contract alone); the obfuscated forms are read by the
            same automata the decoder steps
            (:class:`~guardrail.matching.obfuscation.automaton.ObfuscationAutomaton`, over the text's view).
        shared: read through the process's shared obfuscation automata (built on first use and kept, shared
            with the artefacts the decoder steps). False for untrusted text (the service's ``/v1/check`` and
            moderations): private copies over the same NFAs, started afresh past ``node_limit`` DFA nodes, so
            no client's text grows the automata a generation steps, or holds memory for long.
        node_limit: see ``shared`` (default :data:`PRIVATE_NODE_LIMIT`).

    Example:
        >>> from guardrail.wordlists.wordlist import wordlist_from_terms
        >>> TextMatcher([wordlist_from_terms(["fuck you"])]).scan("well FUCK\\n you")
        [TextMatch(term='fuck you', list_name='request', start=5, end=15)]
    """

    def __init__(self, wordlists: Sequence[WordList], obfuscation: Obfuscation = DEFAULT_OBFUSCATION, *,
                 shared: bool = True, node_limit: int = PRIVATE_NODE_LIMIT):
        wordlists = with_obfuscation(wordlists, obfuscation)
        self._shared = shared
        self._node_limit = node_limit
        self.terms, self.allows = flatten(wordlists)
        views: dict[tuple[bool, bool], list[TermSpec]] = {}
        for spec in self.terms:
            if not spec.obfuscation.off:
                key = (spec.obfuscation.level >= ObfuscationLevel.SPACED, spec.obfuscation.markup)
                views.setdefault(key, []).append(spec)
        self._views: list[tuple[ObfuscationAutomaton, list[TermSpec]]] = [
            (compile_obfuscation_stream(tuple(ObfuscatedTerm(t.normalized, t.match, t.obfuscation) for t in specs),
                                        spaced, markup), specs)
            for (spaced, markup), specs in sorted(views.items())]
        if not shared:
            self._views = self._fresh_views()
        self._modes: list[tuple[bool, ahocorasick.Automaton | None, ahocorasick.Automaton | None,
                                list[TermSpec], RegexAutomaton | None]] = []
        for case_sensitive in (False, True):
            keys: dict[str, list[TermSpec]] = {}
            regexes: list[TermSpec] = []
            for spec in self.terms:
                if spec.case_sensitive != case_sensitive:
                    continue
                if spec.regex:
                    regexes.append(spec)
                else:
                    keys.setdefault(spec.normalized, []).append(spec)
            allow_keys = {a.normalized: a.normalized for a in self.allows if a.case_sensitive == case_sensitive}
            terms = _automaton(keys)
            dfa = compile_regex_stream(regexes, case_sensitive) if regexes else None
            if terms is not None or dfa is not None:
                self._modes.append((case_sensitive, terms, _automaton(allow_keys), regexes, dfa))

    def approx_bytes(self) -> int:
        """What the matcher holds, bytes, estimated from its parts' sizes (their automata's
        :meth:`~guardrail.matching.regex.automaton.RegexAutomaton.approx_bytes`, the Aho-Corasick tries' own
        count, ~350 bytes per term) without a walk over them: a walk over the ``en`` matcher's objects takes
        longer than building it (~1 s). Lazy automata grow with use; this is their size now."""
        total = 350 * (len(self.terms) + len(self.allows)) + 4096
        total += sum(automaton.approx_bytes() for automaton, _ in self._views)
        for _, terms, allows, _, dfa in self._modes:
            total += sum(trie.get_stats()["total_size"] for trie in (terms, allows) if trie is not None)
            total += dfa.approx_bytes() if dfa is not None else 0
        return total

    def _fresh_views(self) -> list[tuple[ObfuscationAutomaton, list[TermSpec]]]:
        return [(automaton.private_copy(), specs) for automaton, specs in self._views]

    def scan(self, text: str) -> list[TextMatch]:
        """All matches in ``text``, overlapping ones included, sorted by (start, end, term).

        Thread-safe. With private automata (``shared=False``), a scan that finds one grown past ``node_limit``
        first replaces them (scans in flight keep the ones they hold), and a scan that reaches an automaton's
        node limit (``MAX_OBFUSCATION_DFA_STATES``) is run once more on fresh ones.

        Raises:
            RegexError: only a fresh automaton's node limit reached by this text alone (shared automata: the
                limit reached, by this text or the ones before it).
        """
        obfuscated: list[TextMatch] = []
        if self._views:
            norm, offsets = normalize_with_offsets(text)
            views = self._views
            if not self._shared and any(a.num_nodes > self._node_limit for a, _ in views):
                views = self._views = self._fresh_views()
            try:
                obfuscated = self._scan_views(views, norm, offsets)
            except RegexError:
                if self._shared:
                    raise
                views = self._views = self._fresh_views()
                obfuscated = self._scan_views(views, norm, offsets)
        found: list[TextMatch] = []
        for case_sensitive, terms, allows, regexes, dfa in self._modes:
            norm, offsets = normalize_with_offsets(text, case_sensitive)
            if dfa is not None:  # allow-terms apply to plain substring terms only
                for term, start, end in dfa.scan(norm):
                    spec = regexes[term]
                    found.append(TextMatch(spec.text, spec.list_name, offsets[start], offsets[end - 1] + 1))
            if terms is None:
                continue
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
        # One report per occurrence: an obfuscation stream also reads the literal occurrences the plain streams
        # report (with a span that may differ at the edges); it adds only the forms they do not see.
        literal = {(m.term, m.list_name, m.start) for m in found}
        found += [m for m in obfuscated if (m.term, m.list_name, m.start) not in literal]
        return sorted(set(found), key=lambda m: (m.start, m.end, m.term, m.list_name))

    @staticmethod
    def _scan_views(views: list[tuple[ObfuscationAutomaton, list[TermSpec]]], norm: str,
                    offsets: Sequence[int]) -> list[TextMatch]:
        found: list[TextMatch] = []
        for automaton, specs in views:
            for term, start, end in automaton.scan(norm):
                spec = specs[term]
                found.append(TextMatch(spec.text, spec.list_name, offsets[start], offsets[end - 1] + 1))
        return found

    def __bool__(self) -> bool:  # noqa: D105
        return bool(self.terms)
