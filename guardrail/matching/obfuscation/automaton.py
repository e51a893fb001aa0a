"""An obfuscation stream: the DFA of obfuscated terms stepped over the stream's view of the text.

One artefact holds up to four such streams, one per view (``spaced`` or not × ``markup`` or not), each with
the case-insensitive terms whose effective level needs that view (``obfuscation.effective``). The DFA is
the regex terms' subset construction over threads that count characters since their match began
(:class:`~guardrail.matching.regex.automaton.RegexAutomaton`), so a node says exactly where the earliest
live form began (hold-back, ``depth``) and where a completed form began (rollback); the NFA comes from
:class:`~guardrail.matching.obfuscation.nfa.ObfuscationNfa`. Symbols are the view's characters.

The stream state's ``pending`` field holds the :class:`~guardrail.matching.obfuscation.view.ViewState`: an
obfuscation stream is never "exact" in the root sweep (the view's state depends on what came before), so
its root transitions are computed on first use like any other, and its ``completing_tokens`` are verified
over the vocab (docs/matching.md, "Obfuscation").
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from typing import cast

from guardrail.matching.automaton import StreamState
from guardrail.matching.normalize import is_word_char
from guardrail.matching.obfuscation import JOINT_MARK
from guardrail.matching.obfuscation.nfa import EMPHASIS_MARKER, ObfuscatedTerm, ObfuscationNfa
from guardrail.matching.obfuscation.view import START as VIEW_START
from guardrail.matching.obfuscation.view import Item, View, ViewState
from guardrail.matching.regex.automaton import START_NODE, WORD_START_NODE, RegexAutomaton

#: DFA nodes one obfuscation stream may have (the default ``en`` list needs a few thousand; see
#: ``bench/obfuscation.py``). A list over it fails to compile with an error naming the stream.
MAX_OBFUSCATION_DFA_STATES = 200_000


class ObfuscationAutomaton(RegexAutomaton):
    """The obfuscation stream of ``terms`` read through a :class:`View` (module docstring).

    Args:
        terms: per local term id, the obfuscated term.
        spaced: the view joins spaced runs and reads stretched letters.
        markup: the view reads markup as rendered.
        max_states: the DFA node limit.
        nfa: the terms' NFA when already built (read from a stored artefact).

    Raises:
        RegexError: more than ``max_states`` DFA nodes.
    """

    #: Tells the artefact this stream is read through a view (no sweep, no always-banned shortcut).
    obfuscation = True
    #: Rows are built on first use: the automaton is made from terms (linear in their size), and exploring all
    #: of it (~20k nodes for ``en`` at ``masked``) would cost a compile ~1.5 s.
    lazy = True

    def __init__(self, terms: Sequence[ObfuscatedTerm], spaced: bool, markup: bool,
                 max_states: int = MAX_OBFUSCATION_DFA_STATES, nfa: ObfuscationNfa | None = None):
        self.terms = tuple(terms)
        self.view = View(spaced, markup)
        self._lock = threading.RLock()
        #: The NFA (stored in the artefact: ``codec.py``); built from ``terms`` when not given.
        self.nfa = ObfuscationNfa(self.terms, spaced, markup) if nfa is None else nfa
        #: Symbols that move threads without counting as characters (stretch and joint marks, combining marks,
        #: emphasis markers with markup: ``ObfuscationNfa.uncounted``).
        self.marks = frozenset(chr(p) for lo, hi in self.nfa.uncounted.ranges for p in range(lo, hi + 1))
        self._between = frozenset((JOINT_MARK, EMPHASIS_MARKER)) & self.marks
        super().__init__([(t.normalized, t.match) for t in self.terms], False, max_states, nfa=self.nfa)

    def private_copy(self) -> ObfuscationAutomaton:
        """A new automaton over the same NFA with no DFA node built yet: for a reader of untrusted text that
        must neither grow the shared automaton (``compile_obfuscation_stream``) the decoder steps nor inherit
        its size (:class:`~guardrail.matching.textmatch.TextMatcher` with ``shared=False``). Cheap: the NFA, the
        costly part, is shared (read-only once built)."""
        return ObfuscationAutomaton(self.terms, self.view.spaced, self.view.markup, self._max_states, nfa=self.nfa)

    def step(self, node: int, char: str) -> int:
        """As :meth:`RegexAutomaton.step`; a node's row is built under the automaton's lock (one automaton
        serves every artefact and text matcher with the same terms)."""
        nxt = self._delta[node].get(char)
        if nxt is None:
            with self._lock:
                nxt = super().step(node, char)
        return nxt

    def fresh(self, previous_word: bool) -> StreamState:
        return StreamState(WORD_START_NODE if previous_word else START_NODE, previous_word, False, VIEW_START)

    def buffered(self, state: StreamState) -> bool:
        """Whether the view holds characters it has not emitted yet (the boundary is then not clean)."""
        return self.view.buffered(cast(ViewState, state.pending))

    def _read(self, node: int, items: list[Item], hits: list[tuple[int, int]], n: int) -> tuple[int, int]:
        """Step the DFA over view characters; ``n`` symbols before them. Returns ``(node, n)``."""
        delta, now, later, marks = self._delta, self.now, self.later, self.marks
        for c, _ in items:
            waiting = later[node]
            if waiting is not None:
                word = is_word_char(c)
                for term, length in waiting[word]:
                    hits.append((term, n - length))
            nxt = delta[node].get(c)
            node = self.step(node, c) if nxt is None else nxt
            if c not in marks:  # the marks move threads but are not characters of a match
                n += 1
            for term, length in now[node]:
                hits.append((term, n - length))
        return node, n

    def feed(self, state: StreamState, text: str, hits: list[tuple[int, int]], symbols_before: int = 0
             ) -> tuple[StreamState, int]:
        node, previous_word, previous_space, pending = state
        view_state = cast(ViewState, pending)
        n = symbols_before
        view, fold = self.view, self._fold
        out: list[Item] = []
        for char in text:
            for c, _ in fold.get(char) or self.fold(char):
                if c == " ":
                    if previous_space:
                        continue
                    previous_space = True
                else:
                    previous_space = False
                view_state = view.step(view_state, c, out)
                if out:
                    node, n = self._read(node, out, hits, n)
                    previous_word = is_word_char(out[-1][0])
                    out.clear()
        return StreamState(node, previous_word, previous_space, view_state), n

    def finish(self, state: StreamState, hits: list[tuple[int, int]], symbols_before: int = 0) -> int:
        """End of text: the view's buffer is emitted, then matches waiting on the next character are
        reported. Returns the symbols emitted; ``hits`` as in :meth:`feed`, after ``symbols_before``."""
        out: list[Item] = []
        self.view.flush(cast(ViewState, state.pending), out)
        node, n = self._read(state.node, out, hits, symbols_before)
        waiting = self.later[node]
        if waiting is not None:
            hits.extend((term, n - length) for term, length in waiting[False])
        return n - symbols_before

    def completes_inside(self, text: str, previous_word: bool) -> bool:
        """Never: what came before can change how the view reads ``text`` (a tag left open hides it), so
        no token completes an obfuscated form from every state. The matcher catches each one."""
        return False

    def scan(self, norm: str) -> list[tuple[int, int, int]]:
        """The matches in normalised text ``norm``: ``(local term id, start, end)`` indexing ``norm`` (as
        :meth:`RegexAutomaton.scan`, over the view; a span covers the characters that produced it)."""
        text, offsets = self.view.text(norm)
        found: list[tuple[int, int, int]] = []
        counted: list[int] = []  # view index of each counted character (the automaton's positions)
        # ``last``: view index of the last character read that belongs to a letter (counted, or a stretch or
        # combining mark after it; not a joint mark or an emphasis marker, which stand between words or letters)
        node, last = START_NODE, -1
        for position, c in enumerate(text):
            waiting = self.later[node]
            if waiting is not None:  # matches ending at the last character, decided by this one
                for term, length in waiting[is_word_char(c)]:
                    found.append((term, offsets[counted[len(counted) - length]], offsets[last] + 1))
            node = self.step(node, c)
            if c not in self.marks:
                counted.append(position)
            if c not in self._between:
                last = position
            for term, length in self.now[node]:
                found.append((term, offsets[counted[len(counted) - length]], offsets[position] + 1))
        waiting = self.later[node]
        if waiting is not None:
            for term, length in waiting[False]:
                found.append((term, offsets[counted[len(counted) - length]], offsets[last] + 1))
        return found


@functools.lru_cache(maxsize=32)
def compile_obfuscation_stream(terms: tuple[ObfuscatedTerm, ...], spaced: bool, markup: bool,
                               max_states: int = MAX_OBFUSCATION_DFA_STATES) -> ObfuscationAutomaton:
    """The stream of ``terms`` for one view, shared between artefacts with the same terms (an LRU of 32:
    stored lists and repeated request terms; the automaton's memo writes are idempotent)."""
    return ObfuscationAutomaton(terms, spaced, markup, max_states)
