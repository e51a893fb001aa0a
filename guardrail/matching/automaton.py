"""Character-level Aho–Corasick automaton with word boundaries and allow-terms (pure, no I/O).

The automaton reads a stream of *symbols*: the normalised characters of the text (see
:mod:`guardrail.matching.normalize`) with one extra symbol, :data:`BOUNDARY`, inserted wherever the text changes
between word and non-word characters (the text start and end count as non-word). A ``word`` term is
compiled to ``BOUNDARY + term + BOUNDARY`` (each side only when the term's edge character is a word
character), a ``prefix`` term to ``BOUNDARY + term``, a ``substring`` term to the bare term. Plain
Aho–Corasick over that stream is then exactly the regex contract ``(?<!\\w)term(?!\\w)`` — and a
pending right boundary is just an unfinished pattern, which the stream end completes (docs/design.md, known traps).

Failure links (Aho & Corasick, "Efficient string matching", CACM 1975) mean a mismatch never drops
the symbol that caused it: "li" + "talk" still finds "talk" (trap 1).

Allow-terms: an occurrence of a ``substring`` term that lies inside an occurrence of an allow-term is
not a match. Whether an allow-term will cover an occurrence may be known only later ("牛" + "奶" + …),
so such occurrences stay *pending* while the automaton node shows an allow-term in progress over them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import NamedTuple

from guardrail.matching.normalize import FoldedChars, is_word_char
from guardrail.wordlists.wordlist import MatchMode

#: The word/non-word transition symbol. NUL is removed by normalisation, so it never occurs in text.
BOUNDARY = "\x00"


def symbol_pattern(normalized: str, match: MatchMode) -> str:
    """The symbol string an occurrence of a normalised term produces in the stream (see module doc)."""
    out = []
    prev_word = is_word_char(normalized[0])
    if match is not MatchMode.SUBSTRING and prev_word:
        out.append(BOUNDARY)
    for char in normalized:
        word = is_word_char(char)
        if word != prev_word:
            out.append(BOUNDARY)
            prev_word = word
        out.append(char)
    if match is MatchMode.WORD and is_word_char(normalized[-1]):
        out.append(BOUNDARY)
    return "".join(out)


class StreamState(NamedTuple):
    """Where one symbol stream stands: hashable, so token transitions can be memoised on it.

    Attributes:
        node: automaton node (0 = root).
        prev_word: the last normalised character was a word character (start of text: False).
        prev_space: the last normalised character was a space (collapses whitespace runs).
        pending: ``(term_id, length_in_symbols)`` of substring occurrences an allow-term may still cover; in
            an obfuscation stream, the state of its view (``obfuscation.view.ViewState``).
    """

    node: int
    prev_word: bool
    prev_space: bool
    pending: tuple


START = StreamState(0, False, False, ())


class Automaton:
    """Aho–Corasick automaton over symbol patterns with a lazily filled DFA transition table.

    Args:
        patterns: symbol pattern of every term (index = term id), from :func:`symbol_pattern`.
        allowable: per term, whether allow-terms apply to it (``substring`` terms).
        allow_patterns: symbol patterns of the allow-terms.
        case_sensitive: which folding the stream applies (each case mode has its own automaton).

    Raises:
        ValueError: if a pattern is empty.
    """

    #: Not a regex stream (:class:`guardrail.matching.regex.automaton.RegexAutomaton` has the same stepping API).
    regex = False

    def __init__(self, patterns: Sequence[str], allowable: Sequence[bool], allow_patterns: Sequence[str],
                 case_sensitive: bool):
        self.case_sensitive = case_sensitive
        self.pattern_length = [len(p) for p in patterns]
        self.allowable = list(allowable)
        self.goto: list[dict[str, int]] = [{}]
        self.depth = [0]
        own_terms: list[list[int]] = [[]]
        allow_end = [False]
        allow_prefix = [False]
        self.prefix_nodes: list[list[int]] = []

        def insert(pattern: str, is_allow: bool) -> list[int]:
            if not pattern:
                raise ValueError("empty pattern")
            node, path = 0, []
            for symbol in pattern:
                nxt = self.goto[node].get(symbol)
                if nxt is None:
                    nxt = len(self.goto)
                    self.goto[node][symbol] = nxt
                    self.goto.append({})
                    self.depth.append(self.depth[node] + 1)
                    own_terms.append([])
                    allow_end.append(False)
                    allow_prefix.append(False)
                node = nxt
                path.append(node)
                if is_allow:
                    allow_prefix[node] = True
            return path

        for term_id, pattern in enumerate(patterns):
            path = insert(pattern, False)
            own_terms[path[-1]].append(term_id)
            self.prefix_nodes.append(path)
        for pattern in allow_patterns:
            allow_end[insert(pattern, True)[-1]] = True

        n = len(self.goto)
        self.fail = [0] * n
        self.outputs: list[tuple[int, ...]] = [()] * n
        # Deepest allow-term completed at / in progress over the current position, along the failure chain.
        self.allow_done = [0] * n
        self.allow_reach = [0] * n
        order = deque([0])
        while order:
            node = order.popleft()
            fail = self.fail[node]
            self.outputs[node] = tuple(own_terms[node]) + (self.outputs[fail] if node else ())
            inherited_done = self.allow_done[fail] if node else 0
            inherited_reach = self.allow_reach[fail] if node else 0
            self.allow_done[node] = self.depth[node] if allow_end[node] else inherited_done
            self.allow_reach[node] = self.depth[node] if allow_prefix[node] else inherited_reach
            for symbol, child in self.goto[node].items():
                if node:
                    f = fail
                    while f and symbol not in self.goto[f]:
                        f = self.fail[f]
                    self.fail[child] = self.goto[f].get(symbol, 0)
                order.append(child)
        self._delta: list[dict[str, int]] = [dict(g) for g in self.goto]
        self._fold = FoldedChars(case_sensitive)

    @property
    def num_nodes(self) -> int:
        return len(self.goto)

    def step(self, node: int, symbol: str) -> int:
        """The node after reading ``symbol`` (DFA transition, memoised)."""
        row = self._delta[node]
        nxt = row.get(symbol)
        if nxt is None:
            f = node
            while f and symbol not in self.goto[f]:
                f = self.fail[f]
            nxt = row[symbol] = self.goto[f].get(symbol, 0)
        return nxt

    def fold(self, char: str) -> tuple[tuple[str, bool], ...]:
        """Normalised characters of one input character, each with its word-character flag (memoised)."""
        return self._fold[char]

    def fresh(self, prev_word: bool) -> StreamState:
        """The state of a stream with nothing in progress after a word (or a non-word) character."""
        return StreamState(0, prev_word, False, ())

    def completes_inside(self, text: str, prev_word: bool) -> bool:
        """Whether ``text`` (decoded) completes a term that begins inside it, after a word (or non-word)
        character; an occurrence an allow-term could cover does not count (the always-banned test)."""
        local: list[tuple[int, int]] = []
        self.feed(self.fresh(prev_word), text, local)
        return any(start >= 0 and not self.allowable[term] for term, start in local)

    def chain(self, node: int):
        """The node and its failure-link ancestors, deepest first (the suffixes that are pattern prefixes)."""
        while node:
            yield node
            node = self.fail[node]

    def feed(self, state: StreamState, text: str, hits: list[tuple[int, int]], symbols_before: int = 0
             ) -> tuple[StreamState, int]:
        """Feed decoded characters; append matches to ``hits``.

        Args:
            state: where the stream stands.
            text: decoded characters (not yet normalised).
            hits: receives ``(term_id, start)`` per confirmed match, ``start`` being the index of the
                match's first symbol relative to the first symbol emitted by this call (negative: it
                began in earlier input).
            symbols_before: symbols already emitted by the caller in the same token (offsets ``start``).

        Returns:
            ``(new_state, symbols_emitted)``; ``symbols_emitted`` includes ``symbols_before``.
        """
        node, prev_word, prev_space, pending = state
        n = symbols_before
        outputs, delta, step, fold = self.outputs, self._delta, self.step, self._fold
        # The hot loop of the compiler's vocab sweep: DFA lookups inlined, method calls only on a miss.
        for char in text:
            for c, word in fold.get(char) or self.fold(char):
                if c == " ":
                    if prev_space:
                        continue
                    prev_space = True
                else:
                    prev_space = False
                if word != prev_word:
                    prev_word = word
                    node = delta[node].get(BOUNDARY) or step(node, BOUNDARY)
                    n += 1
                    if outputs[node] or pending:
                        pending = self._emit(node, n, pending, hits)
                node = delta[node].get(c) or step(node, c)
                n += 1
                if outputs[node] or pending:
                    pending = self._emit(node, n, pending, hits)
        return StreamState(node, prev_word, prev_space, pending), n

    def finish(self, state: StreamState, hits: list[tuple[int, int]]) -> int:
        """End of text: the closing boundary, then every pending occurrence is confirmed.

        Returns the number of symbols emitted (0 or 1); ``hits`` as in :meth:`feed`.
        """
        node, prev_word, _, pending = state
        n = 0
        if prev_word:
            node = self.step(node, BOUNDARY)
            n = 1
            pending = self._emit(node, n, pending, hits)
        hits.extend((term_id, n - length) for term_id, length in pending)
        return n

    def _emit(self, node: int, n: int, pending: tuple, hits: list[tuple[int, int]]) -> tuple:
        """Classify occurrences ending at (or still open over) symbol ``n - 1``; returns the new pending."""
        still: list[tuple[int, int]] = []
        for term_id, length in pending:
            self._classify(node, n, term_id, length + 1, still, hits)
        for term_id in self.outputs[node]:
            self._classify(node, n, term_id, self.pattern_length[term_id], still, hits)
        return tuple(still)

    def _classify(self, node: int, n: int, term_id: int, length: int, still: list, hits: list) -> None:
        if self.allowable[term_id]:
            if self.allow_done[node] >= length:
                return
            if self.allow_reach[node] >= length:
                still.append((term_id, length))
                return
        hits.append((term_id, n - length))
