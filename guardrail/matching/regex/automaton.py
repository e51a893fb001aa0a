"""The regex terms of one case mode as a DFA over normalised characters that knows where matches began.

Aho–Corasick gets a match's start and the hold-back bound from its node depth (docs/matching.md). A regex
has no single depth, so the DFA is built by subset construction over *threads* ``(NFA state, characters
since the thread's match began)``, keeping per NFA state only the largest count (the earliest start: two
threads in the same state have the same future, and the earlier one is the one to roll back to). Because
every match is at most ``MAX_REGEX_SPAN`` characters long (no unbounded repetition), the counts are bounded
and the construction is finite. A DFA node then tells, exactly:

* ``depth[node]``: the largest count of a live thread — how many of the latest characters a match still in
  progress may have begun in (the lookback that hold-back streaming and ``releasable()`` use);
* ``now[node]``: per term, the length of the longest match ending at this position, reported when the node
  is entered if it does not depend on the next character;
* ``later[node][next_is_word]``: the same for matches whose trailing ``\\b``/``\\B``/edge assertion reads the
  next character (a ``word`` regex ending in a word character, like a pending right boundary of a plain
  word term): reported when that character arrives, or at the end of the text (a non-word context).

So a hit is reported as soon as the earliest-starting match ending at a position is decided, with that
start; one report per term and end position (:meth:`RegexAutomaton.scan`, the text matcher's engine for
regex terms, reports the same, and so does the tests' Python ``re`` oracle).

The whole DFA is explored when the terms are compiled, over the classes of an
:class:`~guardrail.matching.charset.Alphabet`, and refused beyond :data:`MAX_REGEX_DFA_STATES` nodes: the
state space of an artefact stays bounded (no state is created at decode time that the compile did not
count) and a pattern like ``a.{0,60}b``, whose subset construction is exponential, fails at compile time
with a clear error instead of growing without bound in a serving process. Steps at decode time cost one
dictionary lookup per character (memoised per node, like the Aho–Corasick automaton).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from guardrail.matching.automaton import StreamState
from guardrail.matching.charset import Alphabet
from guardrail.matching.normalize import FoldedChars, is_word_char
from guardrail.matching.regex.nfa import Nfa
from guardrail.matching.term_spec import TermSpec, term_spec
from guardrail.sized_cache import SizedLRU
from guardrail.wordlists.regex_syntax import RegexError
from guardrail.wordlists.wordlist import MatchMode, WordList, WordListError

#: DFA nodes the regex terms of one case mode of a stored list set may need. Exploring costs ~20 us per node
#: (measured on the 2-core dev machine under load, ``a.{0,40}b``), so a refused pattern costs ~1 s of
#: compile, once (stored artefacts are cached), and the table stays ~10 MB at most (nodes x character
#: classes). Typical terms need a few to a few hundred nodes (``s[o0]rry``: 7; its one-edit variants
#: ``.orry|s.rry|so.ry|sor.y|sorr.``: 31; one-edit variants of 270 English terms together: ~15,500);
#: patterns that track unaligned positions (``a.{0,30}b`` in substring mode) grow exponentially and are
#: refused.
MAX_REGEX_DFA_STATES = 50_000

#: The same limit for a request's own terms (``banned_terms``), compiled for each request: a refused
#: pattern costs ~0.2 s of that request, not ~1 s.
MAX_REQUEST_REGEX_DFA_STATES = 10_000

#: Bytes of compiled automata kept for reuse (request terms repeat; a stored list's artefact build and the
#: text matcher compile the same patterns): ~16 automata of the request limit, ~2 of the stored-list limit.
AUTOMATON_CACHE_BYTES = 64 * 1024 * 1024


#: States added between two voluntary releases of the GIL by a budgeted compile (~0.2-1 ms of work).
_YIELD_EVERY = 8


class CompileBudgetExceeded(RegexError):
    """The compile ran past its deadline (``construct`` ``"compile time"``): the caller's time budget, not a
    property of one term."""


#: Node ids fixed by construction: the text start (nothing pending, a non-word context), and a fresh
#: context after a word character (used to test whether a token completes a match in any context).
START_NODE, WORD_START_NODE = 0, 1


class RegexAutomaton:
    """The DFA of the regex terms of one case mode (see the module docstring).

    Args:
        patterns: per local term id, its rewritten pattern (``TermSpec.normalized``) and match mode.
        case_sensitive: which folding the stream applies (as :class:`~guardrail.matching.automaton.Automaton`).
        max_states: the node limit: :data:`MAX_REGEX_DFA_STATES` (stored lists) or
            :data:`MAX_REQUEST_REGEX_DFA_STATES` (a request's terms).
        nfa: the NFA to determinise instead of the one of ``patterns`` (obfuscated terms:
            :class:`~guardrail.matching.obfuscation.nfa.ObfuscationNfa`).
        deadline: ``time.monotonic()`` past which the construction stops (None: no limit). Checked as nodes are
            added, so a compile in a worker thread (which cannot be killed) ends within about one node's work.

    Raises:
        RegexError: too many NFA states for a term, or more than ``max_states`` DFA nodes
            (``construct`` ``"automaton size"``); :func:`compile_regex_stream` names the term.
        CompileBudgetExceeded: past ``deadline``.
    """

    #: Tells the artefact's mask and retry-ban code which kind of stream this is.
    regex = True

    def __init__(self, patterns: Sequence[tuple[str, MatchMode]], case_sensitive: bool,
                 max_states: int = MAX_REGEX_DFA_STATES, nfa: Nfa | None = None, deadline: float | None = None):
        self.case_sensitive = case_sensitive
        self.patterns = tuple(patterns)
        if nfa is None:
            nfa = Nfa(self.patterns)
        uncounted_chars = getattr(nfa, "uncounted", None)
        alphabet = self.alphabet = Alphabet(nfa.charsets + ([uncounted_chars] if uncounted_chars else []))
        #: Classes whose characters move threads without counting as a character of the match (an obfuscation
        #: view's stretch mark: ``obfuscation_view``); their members are the last set given to the alphabet.
        uncounted = frozenset(alphabet.members[-1]) if uncounted_chars else frozenset()
        self.uncounted_chars = uncounted_chars
        self._subsets = subsets = _Subsets(nfa, alphabet)
        self._uncounted = uncounted
        self._max_states = max_states
        self._deadline = deadline
        self._keys: dict[tuple, int] = {}
        self._order: list[tuple] = []
        self.depth: list[int] = []
        self.now: list[tuple[tuple[int, int], ...]] = []
        self.later: list[tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int], ...]] | None] = []
        self.now_max: list[int] = []
        self.later_max: list[tuple[int, int]] = []
        self._table: list[list[int] | None] = []
        self._delta: list[dict[str, int]] = []
        # The row of a node with no thread, per context before: most classes of any row lead where they do.
        self._empty_rows: dict[bool, list[int]] = {}
        # A node is (threads begun at the last character, older threads, the last character is a word character);
        # see _Subsets.
        self._node_of((0, (), False))  # START_NODE
        self._node_of((0, (), True))  # WORD_START_NODE
        if not self.lazy:
            index = 0
            while index < len(self._order):
                self._expand(index)
                index += 1
        self._deadline = None  # the budget was the compile's; a lazy automaton grows later, on its own terms
        self.nfa_states = nfa.num_states
        #: Terms whose report can wait for the next character (see :meth:`completes_inside`; for a lazy
        #: automaton, those of the nodes built so far).
        self.delayable = frozenset(t for later in self.later if later for side in later for t, _ in side)
        #: Whether a match can begin after a word character where it cannot after a non-word one (a
        #: leading ``\\B`` before a word character, ``\\b`` before a non-word one): then a token read from the
        #: text start (a non-word context, the root sweep's) does not show every match it can hold. (Not
        #: computed for a lazy automaton: an obfuscation stream is never swept.)
        self.word_context_starts = not self.lazy and any(
            not set(subsets.fresh_states(after_word.get(cls, 0))) <= set(subsets.fresh_states(after_other.get(cls, 0)))
            for next_word in (0, 1)
            for after_word, after_other in [(subsets.start_moves(2 + next_word), subsets.start_moves(next_word))]
            for cls in after_word)
        self._fold = FoldedChars(case_sensitive)

    #: Build node rows on first use instead of exploring the whole DFA when compiled (obfuscation streams,
    #: whose automata are made from terms, not from patterns a user wrote: their size is linear in the terms).
    lazy = False

    def approx_bytes(self) -> int:
        """What the automaton holds, bytes, estimated from its size: per node a row of ``alphabet.size`` node
        ids (a list of 8-byte pointers), its key, report tuples and memo (~700 bytes, measured with
        :func:`guardrail.sized_cache.deep_sizeof` on request-sized automata), and per NFA state its moves
        (~170 bytes: the ``en`` list's obfuscation NFA, 96,661 states, weighs 16.5 MB)."""
        return self.num_nodes * (8 * self.alphabet.size + 700) + self.nfa_states * 170 + 4096

    @property
    def num_nodes(self) -> int:
        """DFA nodes (for a lazy automaton: built so far)."""
        return len(self._order)

    def _node_of(self, key: tuple) -> int:
        found = self._keys.get(key)
        if found is None:
            if self._deadline is not None:
                if time.monotonic() > self._deadline:
                    raise CompileBudgetExceeded("compile time", "the regex terms did not compile within the time "
                                                "budget")
                if len(self._order) % _YIELD_EVERY == 0:
                    # A budgeted compile runs beside a server's event loop: hand the GIL over now and then (a
                    # waiting thread otherwise waits out the 5 ms switch interval, once per compile thread).
                    time.sleep(0)
            if len(self._order) >= self._max_states:
                raise RegexError("automaton size", f"the regex terms need more than {self._max_states} automaton "
                                 "states: a pattern tracks too many overlapping positions (like a.{0,30}b); "
                                 "narrow classes and bounds, or anchor it with literals")
            fresh, older, previous_word = key
            subsets = self._subsets
            completed: dict[bool, dict[int, int]] = {}
            for next_word in (False, True):
                context = 2 * previous_word + next_word
                done, _ = subsets.older_moves(older, context)
                for term in subsets.fresh_moves(fresh, context)[0]:  # a match of one character
                    done.setdefault(term, 1)
                completed[next_word] = done
            now = tuple(sorted((t, n) for t, n in completed[True].items() if completed[False].get(t) == n))
            decided = {t for t, _ in now}
            later = tuple(tuple(sorted((t, n) for t, n in completed[w].items() if t not in decided))
                          for w in (False, True))
            # Lists first, then publish the id (a lazy automaton's readers index them without a lock).
            self.depth.append(max((count for _, count in older), default=1 if fresh else 0))
            self.now.append(now)
            self.now_max.append(max((n for _, n in now), default=0))
            waiting = (later[0], later[1]) if later[0] or later[1] else None
            self.later.append(waiting)
            self.later_max.append((0, 0) if waiting is None else
                                  (max((n for _, n in later[0]), default=0), max((n for _, n in later[1]), default=0)))
            self._table.append(None)
            self._delta.append({})
            found = self._keys[key] = len(self._order)
            self._order.append(key)
        return found

    def _expand(self, index: int) -> list[int]:
        """Build the row of node ``index``: the node after each character class."""
        fresh, older, previous_word = self._order[index]
        subsets, node_of, alphabet = self._subsets, self._node_of, self.alphabet
        if previous_word not in self._empty_rows:
            self._empty_rows[previous_word] = [
                node_of((subsets.start_moves(2 * previous_word + w).get(cls, 0), (), w))
                for cls, w in enumerate(alphabet.is_word)]
        row = self._empty_rows[previous_word].copy()
        for next_word in (False, True):
            context = 2 * previous_word + next_word
            _, moves = subsets.older_moves(older, context)
            _, fresh_moves = subsets.fresh_moves(fresh, context)
            begun = subsets.start_moves(context)
            for cls in sorted(moves.keys() | fresh_moves.keys()):  # of word-ness next_word only
                reached = moves.get(cls)
                second = fresh_moves.get(cls, ())
                if cls in self._uncounted:  # threads move but do not count it; nothing begins at it
                    kept = tuple(sorted((q, count - 1) for q, count in (reached or {}).items()))
                    row[cls] = node_of((subsets.fresh_id(second), kept, next_word))
                    continue
                if reached is None:
                    kept = tuple((q, 2) for q in second)
                else:
                    for q in second:  # older threads in the same NFA state began earlier: keep theirs
                        reached.setdefault(q, 2)
                    kept = tuple(sorted(reached.items()))
                row[cls] = node_of((begun.get(cls, 0), kept, next_word))
        self._table[index] = row
        return row

    def step(self, node: int, char: str) -> int:
        """The node after the normalised character ``char`` (memoised per node)."""
        nxt = self._delta[node].get(char)
        if nxt is None:
            row = self._table[node]
            if row is None:
                row = self._expand(node)
            nxt = self._delta[node][char] = row[self.alphabet.class_of(ord(char))]
        return nxt

    def fold(self, char: str) -> tuple[tuple[str, bool], ...]:
        """Normalised characters of one input character, each with its word-character flag (memoised)."""
        return self._fold[char]

    def fresh(self, previous_word: bool) -> StreamState:
        """The state of a stream with nothing in progress after a word (or a non-word) character."""
        return StreamState(WORD_START_NODE if previous_word else START_NODE, previous_word, False, ())

    def feed(self, state: StreamState, text: str, hits: list[tuple[int, int]], symbols_before: int = 0
             ) -> tuple[StreamState, int]:
        """Feed decoded characters; as :meth:`guardrail.matching.automaton.Automaton.feed` (symbols are the
        normalised characters: this stream has no boundary symbols)."""
        node, previous_word, previous_space, _ = state
        n = symbols_before
        fold, delta, now, later = self._fold, self._delta, self.now, self.later
        for char in text:
            for c, word in fold.get(char) or self.fold(char):
                if c == " ":
                    if previous_space:
                        continue
                    previous_space = True
                else:
                    previous_space = False
                previous_word = word
                waiting = later[node]
                if waiting is not None:
                    for term, length in waiting[word]:
                        hits.append((term, n - length))
                nxt = delta[node].get(c)
                node = self.step(node, c) if nxt is None else nxt
                n += 1
                for term, length in now[node]:
                    hits.append((term, n - length))
        return StreamState(node, previous_word, previous_space, ()), n

    def finish(self, state: StreamState, hits: list[tuple[int, int]]) -> int:
        """End of text (a non-word context): matches waiting on the next character are reported.
        Returns the number of symbols emitted (always 0); ``hits`` as in :meth:`feed`."""
        waiting = self.later[state.node]
        if waiting is not None:
            hits.extend((term, -length) for term, length in waiting[False])
        return 0

    def scan(self, norm: str) -> list[tuple[int, int, int]]:
        """The matches in normalised text ``norm``: ``(local term id, start, end)`` (indexes into ``norm``, end
        exclusive), one per term and end position, from the earliest start of a match ending there; in
        the order they are reported (by end, then term). Linear in ``len(norm)``: the text matcher's engine
        for regex terms (see docs/matching.md on why not a backtracking engine)."""
        found: list[tuple[int, int, int]] = []
        node, now, later = START_NODE, self.now, self.later
        for n, char in enumerate(norm):
            waiting = later[node]
            if waiting is not None:
                found.extend((term, n - length, n) for term, length in waiting[is_word_char(char)])
            node = self.step(node, char)
            found.extend((term, n + 1 - length, n + 1) for term, length in now[node])
        waiting = later[node]
        if waiting is not None:
            found.extend((term, len(norm) - length, len(norm)) for term, length in waiting[False])
        return found

    def completes_inside(self, text: str, previous_word: bool) -> bool:
        """Whether ``text`` (decoded) completes a match that begins inside it whatever precedes it (given
        the word-ness of the character before it; the always-banned test).

        Threads of earlier text can only add matches, except in one way: a longer match of the same term
        ending at the same position whose report waits for the next character delays the report (see the
        module docstring). A match reported at the very end of ``text`` therefore counts only for a term
        that is never delayed (not in :attr:`delayable`).
        """
        node, previous_space, n = self.fresh(previous_word).node, False, 0
        reported: list[tuple[int, int]] = []  # (term, end) of matches that began inside ``text``
        for char in text:
            for c, word in self.fold(char):
                if c == " ":
                    if previous_space:
                        continue
                    previous_space = True
                else:
                    previous_space = False
                waiting = self.later[node]
                if waiting is not None and any(n - length >= 0 for _, length in waiting[word]):
                    return True  # decided by a character of ``text``: no earlier text changes that
                node = self.step(node, c)
                n += 1
                reported.extend((term, n) for term, length in self.now[node] if n - length >= 0)
        return any(end < n or term not in self.delayable for term, end in reported)


class _Subsets:
    """The subset construction's moves, memoised so that a node costs what its *older* threads cost.

    A DFA node's threads are split in two: those that began at the last character (count 1) form a set that
    depends only on that character's class and the context, shared by many nodes (with many terms, a
    hundred or more threads: every term that may begin with that character), so their moves are computed
    once per set and context and the set is referred to by an id; the older threads (count >= 2) are
    few, and are the only ones closed and moved per node. The two parts may hold the same NFA state: the
    older thread's count is the larger and wins wherever counts are compared.

    Args:
        nfa: the union NFA.
        alphabet: its character classes.
    """

    def __init__(self, nfa: Nfa, alphabet: Alphabet):
        self.nfa = nfa
        self.by_word = {w: [c for c in range(alphabet.size) if alphabet.is_word[c] == w] for w in (False, True)}
        # reads[s][w]: the classes of word-ness w that character set s (``nfa.charsets``) holds; a consuming
        # state q reads ``reads[nfa.consumes[q]]`` (per set, not per state: obfuscated terms have ~30k states
        # over ~50 sets).
        self.reads: list[dict[bool, list[int]]] = [
            {w: [c for c in members if alphabet.is_word[c] == w] for w in (False, True)}
            for members in alphabet.members[:len(nfa.charsets)]]
        self._consumes = nfa.consumes
        self.fresh_sets: dict[tuple[int, ...], int] = {(): 0}
        self._fresh_list: list[tuple[int, ...]] = [()]
        self._start_moves: dict[int, dict[int, int]] = {}
        self._fresh_moves: dict[tuple[int, int], tuple[tuple[int, ...], dict[int, tuple[int, ...]]]] = {}

    def _moves(self, states, context: int) -> tuple[set[int], dict[int, set[int]]]:
        """Terms completed by epsilon moves from ``states`` in ``context``, and per class the states reached."""
        completed: set[int] = set()
        moves: dict[int, set[int]] = {}
        next_word = bool(context & 1)
        for state in states:
            consuming, terms = self.nfa.closure(state, context)
            completed.update(terms)
            for q in consuming:
                after = self.nfa.target[q]
                for cls in self.reads[self._consumes[q]][next_word]:
                    moves.setdefault(cls, set()).add(after)
        return completed, moves

    def start_moves(self, context: int) -> dict[int, int]:
        """Per class, the id of the set of states reached by matches beginning at this character."""
        found = self._start_moves.get(context)
        if found is None:
            _, moves = self._moves(self.nfa.starts, context)
            found = self._start_moves[context] = {cls: self._fresh_id(tuple(sorted(states)))
                                                  for cls, states in moves.items()}
        return found

    def fresh_id(self, states: tuple[int, ...]) -> int:
        """The id of the set of fresh-thread states ``states`` (sorted), interned."""
        return self._fresh_id(states)

    def _fresh_id(self, states: tuple[int, ...]) -> int:
        found = self.fresh_sets.get(states)
        if found is None:
            found = self.fresh_sets[states] = len(self._fresh_list)
            self._fresh_list.append(states)
        return found

    def fresh_states(self, fresh: int) -> tuple[int, ...]:
        """The NFA states of set ``fresh``."""
        return self._fresh_list[fresh]

    def fresh_moves(self, fresh: int, context: int) -> tuple[tuple[int, ...], dict[int, tuple[int, ...]]]:
        """Terms completed (length 1) by the threads of set ``fresh``, and per class the states they reach."""
        key = (fresh, context)
        found = self._fresh_moves.get(key)
        if found is None:
            completed, moves = self._moves(self._fresh_list[fresh], context)
            found = self._fresh_moves[key] = (tuple(sorted(completed)),
                                              {cls: tuple(sorted(states)) for cls, states in moves.items()})
        return found

    def older_moves(self, older: tuple[tuple[int, int], ...], context: int
                    ) -> tuple[dict[int, int], dict[int, dict[int, int]]]:
        """For threads ``(state, count)``: per term the longest match completed here, and per class the
        threads reached (counts + 1; the largest count per state)."""
        done: dict[int, int] = {}
        moves: dict[int, dict[int, int]] = {}
        next_word = bool(context & 1)
        for state, count in older:
            consuming, terms = self.nfa.closure(state, context)
            for term in terms:
                if done.get(term, 0) < count:
                    done[term] = count
            for q in consuming:
                after = self.nfa.target[q]
                for cls in self.reads[self._consumes[q]][next_word]:
                    reached = moves.setdefault(cls, {})
                    if reached.get(after, 0) <= count:
                        reached[after] = count + 1
        return done, moves


#: Compiled automata by (patterns, case mode); one is valid for any node limit at or above its size.
AUTOMATA: SizedLRU[tuple, RegexAutomaton] = SizedLRU(AUTOMATON_CACHE_BYTES, lambda a: a.approx_bytes())


def _cached(patterns: tuple[tuple[str, MatchMode], ...], case_sensitive: bool, max_states: int,
            deadline: float | None) -> RegexAutomaton:
    key = (patterns, case_sensitive)
    found = AUTOMATA.get(key)
    if found is not None and found.num_nodes <= max_states:
        return found
    built = RegexAutomaton(patterns, case_sensitive, max_states, deadline=deadline)
    AUTOMATA.put(key, built)
    return built


def compile_regex_stream(specs: Sequence[TermSpec], case_sensitive: bool,
                         max_states: int = MAX_REGEX_DFA_STATES, deadline: float | None = None) -> RegexAutomaton:
    """The :class:`RegexAutomaton` of ``specs`` (regex terms of one case mode), shared between artefacts
    with the same patterns (an LRU of :data:`AUTOMATON_CACHE_BYTES`: request terms repeat; the automaton's
    memo writes are idempotent).

    Raises:
        WordListError: naming the list and the term (one that is too large on its own, found by bisection), or
            the lists when only the terms together exceed ``max_states``.
        CompileBudgetExceeded: past ``deadline`` (``time.monotonic()``).
    """
    try:
        return _build(specs, case_sensitive, max_states, deadline)
    except _TooLarge as exc:
        if exc.index is not None:
            spec = specs[exc.index]
            raise WordListError(f"term {spec.text!r}: {exc.reason}", spec.list_name) from None
        names = ", ".join(sorted({spec.list_name for spec in specs}))
        raise WordListError(f"the {len(specs)} regex terms of these lists together: {exc.reason}", names) from None


class _TooLarge(Exception):
    """A stream's automaton is over a limit; ``index``: the term (in the caller's order) over it on its own."""

    def __init__(self, index: int | None, reason: str):
        super().__init__(reason)
        self.index, self.reason = index, reason


def _build(specs: Sequence[TermSpec], case_sensitive: bool, max_states: int,
           deadline: float | None = None) -> RegexAutomaton:
    """The automaton of ``specs``; when it is over a limit, the term at fault is found by bisection (a half
    that fails alone holds a culprit): about ``2 log2(n)`` builds of at most ``max_states`` nodes each, not
    one build per term. Every build stops at ``deadline``.

    Raises:
        _TooLarge: with the index of a term over a limit on its own, or None when only a set of terms together is.
        CompileBudgetExceeded: past ``deadline``, the culprit search included.
    """
    patterns = list(stream_key(specs, case_sensitive)[0])
    try:
        return _cached(tuple(patterns), case_sensitive, max_states, deadline)
    except CompileBudgetExceeded:
        raise
    except RegexError as together:
        failing, reason = list(range(len(specs))), together.reason
    while len(failing) > 1:
        half = len(failing) // 2
        for part in (failing[:half], failing[half:]):
            try:
                _cached(tuple(patterns[i] for i in part), case_sensitive, max_states, deadline)
            except CompileBudgetExceeded:
                raise
            except RegexError as exc:
                failing, reason = part, exc.reason
                break
        else:  # both halves compile: only the set together is too large
            raise _TooLarge(None, reason)
    raise _TooLarge(failing[0], reason)


def regex_streams(wordlist: WordList, source: str = "<request>") -> list[tuple[bool, list[TermSpec], list[int]]]:
    """The regex terms of ``wordlist`` by case mode: ``(case_sensitive, specs, lines)`` for each mode that has
    any, ``lines`` the 1-based index in ``wordlist.terms`` of each spec's term.

    Raises:
        WordListError: from ``source``, with the ``line`` of a term whose rewrite fails.
    """
    streams = []
    for case_sensitive in (False, True):
        specs: list[TermSpec] = []
        lines: list[int] = []
        for line, term in enumerate(wordlist.terms, start=1):
            if term.regex and term.case_sensitive == case_sensitive:
                try:
                    specs.append(term_spec(len(specs), wordlist.name, term))
                except WordListError as exc:
                    raise WordListError(exc.reason, source, line) from None
                lines.append(line)
        if specs:
            streams.append((case_sensitive, specs, lines))
    return streams


def stream_key(specs: Sequence[TermSpec], case_sensitive: bool) -> tuple:
    """The key of the automaton of ``specs`` in :data:`AUTOMATA`."""
    return tuple((spec.normalized, spec.match) for spec in specs), case_sensitive


def cached_automata(wordlist: WordList, max_states: int) -> bool:
    """Whether every regex stream of ``wordlist`` is already in :data:`AUTOMATA` within ``max_states`` nodes
    (then :func:`check_regex_terms` would build nothing).

    Raises:
        WordListError: as :func:`regex_streams`.
    """
    for case_sensitive, specs, _ in regex_streams(wordlist):
        found = AUTOMATA.get(stream_key(specs, case_sensitive))
        if found is None or found.num_nodes > max_states:
            return False
    return True


def check_regex_terms(wordlist: WordList, max_states: int = MAX_REGEX_DFA_STATES, source: str = "<request>",
                      deadline: float | None = None) -> list[tuple[tuple, RegexAutomaton]]:
    """Check that ``wordlist``'s regex terms compile: their rewrite over normalised text and the automaton
    limits, which parsing cannot check. The service calls it before it stores a list or queues a request
    (the automata are then in the LRU :func:`compile_regex_stream` reads).

    Returns:
        ``(key, automaton)`` of each case mode's stream (the :data:`AUTOMATA` entries, for a caller that built
        them in another process: service/compile_process.py).

    Raises:
        WordListError: from ``source``, with ``line`` = the 1-based index in ``wordlist.terms`` of the term
            at fault (``None`` when only the terms of one case mode together are too large).
        CompileBudgetExceeded: past ``deadline`` (``time.monotonic()``; None: no limit).
    """
    built = []
    for case_sensitive, specs, lines in regex_streams(wordlist, source):
        try:
            built.append((stream_key(specs, case_sensitive), _build(specs, case_sensitive, max_states, deadline)))
        except _TooLarge as exc:
            if exc.index is None:
                raise WordListError(f"the {len(specs)} regex terms together: {exc.reason}", source) from None
            spec = specs[exc.index]
            raise WordListError(f"term {spec.text!r}: {exc.reason}", source, lines[exc.index]) from None
    return built
