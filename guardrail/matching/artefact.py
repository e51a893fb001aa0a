"""The artefact every caller uses: the compiled table (:class:`~guardrail.matching.artefact_table.ArtefactTable`,
immutable, what the codec stores) plus its run-time memo (state ids, transitions, completing tokens), filled
lazily and thread-safe.

An :class:`Artefact` is built once per (tokenizer, word-list version) by :mod:`guardrail.matching.compiler`,
shared by every request, and drives :class:`guardrail.matching.token_matcher.TokenMatcher`. A decode step costs
one memoised dictionary lookup; the first visit of a (state, token) pair feeds the token's bytes through
an incremental UTF-8 decoder and the character automata (one per case mode; :meth:`ArtefactTable.step`), a
few microseconds. States are interned tuples ``(utf8_pending_bytes, StreamState, ...)``; state id 0 is the
text start. The streams are described in :mod:`guardrail.matching.artefact_table`.

Thread safety: one artefact is shared by every request of a process. Reads of the memo (the per-step
fast path) take no lock; every write (a new transition, a new state, the lazily built indexes) happens
under the artefact's lock, and a state id is published only after its memo row exists, so a reader
never sees an id it cannot index (issue 8: unguarded, 8 threads on a cold artefact raised IndexError).
The table needs no lock: nothing in it changes after construction.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple

import numpy as np

from guardrail.matching.artefact_table import (
    LAZY_REGEX_ALWAYS_BANNED_CANDIDATES,
    ArtefactTable,
    RootSweep,
    Step,
    StreamAutomaton,
    root_texts,
)
from guardrail.matching.automaton import Automaton, StreamState
from guardrail.matching.obfuscation.automaton import ObfuscationAutomaton
from guardrail.matching.obfuscation.nfa import ObfuscationNfa
from guardrail.matching.regex.automaton import MAX_REGEX_DFA_STATES, RegexAutomaton
from guardrail.matching.regex.tokens import continuing_tokens
from guardrail.matching.term_spec import AllowSpec, TermSpec
from guardrail.matching.token_text import TokenTextIndex, token_difference, token_set
from guardrail.matching.vocab import TokenVocab

__all__ = ["COMPLETING_LIMIT", "LAZY_REGEX_ALWAYS_BANNED_CANDIDATES", "MEMO_LIMIT", "ROOT_STATE", "Artefact",
           "ArtefactTable", "RootSweep", "StreamAutomaton", "Transition"]

ROOT_STATE = 0
#: Memoised (state, token) pairs kept before the non-root memo is cleared (bounds a long-lived process).
MEMO_LIMIT = 2_000_000
#: States whose completing tokens are memoised before that memo is cleared (a mask can hold ~100k ids).
COMPLETING_LIMIT = 4096


class Transition(NamedTuple):
    """The effect of one token from one state.

    Attributes:
        state: the next state id.
        hits: ``(term_id, stream, start)`` per completed match; ``start`` indexes the stream's symbols
            relative to the first symbol this token emitted (negative: the term began in an earlier token).
        symbols: symbols emitted per stream.
        lead: per stream, symbols emitted by the token's first character when that character's first
            bytes came from earlier tokens (split UTF-8); 0 otherwise.
        quiet: the next state has no match in progress on any stream (lookback 0) and no pending bytes:
            every token so far is releasable and the boundary after this token is clean. Carried here so
            that the per-token path of most prose tokens reads no per-state memo (``False`` is always
            safe: the matcher then asks :meth:`Artefact.lookback` and :meth:`Artefact.has_pending_bytes`).
    """

    state: int
    hits: tuple[tuple[int, int, int], ...]
    symbols: tuple[int, ...]
    lead: tuple[int, ...]
    quiet: bool = False



class DenseRow(list[Transition | None]):
    """A memo row with a slot per token id (a state :meth:`Artefact.fill_memo` swept): ``list[Transition | None]``
    indexed by token id, ``None`` where the sweep was not exact and the pair was not visited yet.

    It answers ``get`` as a ``dict`` row does, by indexing instead of hashing: after a forward pass has
    evicted the CPU caches, a dict lookup misses on its index, its entry and the key object, an index on
    one slot (and the few hundred distinct transitions a sweep yields stay cached). Outside the memo bound
    (:data:`MEMO_LIMIT`) and never cleared: its size is fixed, ``len(vocab)`` slots.
    """

    __slots__ = ()
    get = list.__getitem__  # None in a hole, as a dict row's ``get`` answers for a pair not visited


#: One state's memo: token id -> transition, sparse (visited pairs) or dense (a swept state).
MemoRow = dict[int, Transition] | DenseRow


class Artefact:
    """Token-level automaton for one vocab and one set of terms: :attr:`table` and its memo.

    Args:
        vocab, terms, allows, sweep, lazy, regex_states, obfuscation_nfas: see
            :class:`~guardrail.matching.artefact_table.ArtefactTable` (built here from them).
        table: an already built table instead (the other arguments are then not given).

    Raises:
        WordListError, ValueError: from :class:`ArtefactTable`.
        TypeError: both ``table`` and table arguments, or neither.
    """

    def __init__(self, vocab: TokenVocab | None = None, terms: Sequence[TermSpec] = (),
                 allows: Sequence[AllowSpec] = (), sweep: RootSweep | None = None, *, lazy: bool = False,
                 regex_states: int = MAX_REGEX_DFA_STATES, obfuscation_nfas: Sequence[ObfuscationNfa] | None = None,
                 table: ArtefactTable | None = None):
        if (table is None) == (vocab is None):
            raise TypeError("Artefact: give either the table's arguments or a table")
        if table is None:
            assert vocab is not None
            table = ArtefactTable(vocab, terms, allows, sweep, lazy=lazy, regex_states=regex_states,
                                  obfuscation_nfas=obfuscation_nfas)
        self.table = table
        self._lock = threading.Lock()
        self._states: list[tuple] = []
        self._state_ids: dict[tuple, int] = {}
        self._memo: list[MemoRow] = []
        self._intern(table.root_state)
        self._memo_size = 0
        self._finish_memo: dict[int, Transition] = {}
        self._candidate_indexes: dict[int, tuple[list[list[int]], dict[int, list[int]]]] = {}
        self._completing: dict[int, np.ndarray] = {}
        self._continuations: list[dict[int, frozenset[str]]] | None = None
        self._start_candidates: np.ndarray | None = table.begin_candidates
        # Per state id (never cleared: a state id keeps its meaning, and states are few next to transitions).
        self._pending_memo: dict[int, bool] = {}
        self._lookback_memo: dict[int, tuple[int, ...]] = {}

    # -- the table's parts (read-only) --------------------------------------------------------------
    @property
    def vocab(self) -> TokenVocab:
        return self.table.vocab

    @property
    def terms(self) -> tuple[TermSpec, ...]:
        """The flattened terms; a hit's ``term_id`` indexes them."""
        return self.table.terms

    @property
    def allows(self) -> tuple[AllowSpec, ...]:
        return self.table.allows

    @property
    def automata(self) -> list[StreamAutomaton]:
        """One automaton per stream (:mod:`guardrail.matching.artefact_table`)."""
        return self.table.automata

    @property
    def global_ids(self) -> list[list[int]]:
        """Per stream: local term id -> global term id."""
        return self.table.global_ids

    @property
    def stream_of(self) -> dict[int, tuple[int, int]]:
        """Global term id -> (stream, local id) of its plain stream."""
        return self.table.stream_of

    @property
    def sweep(self) -> RootSweep | None:
        """The root sweep (``None`` for a lazy artefact)."""
        return self.table.sweep

    @property
    def lazy(self) -> bool:
        return self.table.lazy

    @property
    def always_banned(self) -> np.ndarray:
        """``int64[k]`` token ids whose own text completes a term from any state (mask them every step)."""
        return self.table.always_banned

    def sweep_root(self) -> RootSweep:
        """See :meth:`ArtefactTable.sweep_root`."""
        return self.table.sweep_root()

    # -- states -------------------------------------------------------------------------------------

    def _intern(self, state: tuple) -> int:
        """The id of ``state``, interning it when new. Call with the lock held (or from ``__init__``)."""
        state_id = self._state_ids.get(state)
        if state_id is None:
            state_id = len(self._states)
            # Row and state first, then publish the id: a lock-free reader never gets an id it cannot index.
            self._memo.append({})
            self._states.append(state)
            self._state_ids[state] = state_id
        return state_id

    @property
    def num_states(self) -> int:
        """States interned so far (grows lazily as new contexts are decoded)."""
        return len(self._states)

    def stream_states(self, state_id: int) -> tuple[StreamState, ...]:
        return self._states[state_id][1:]

    def has_pending_bytes(self, state_id: int) -> bool:
        """See :meth:`ArtefactTable.has_pending_bytes` (memoised per state: asked at every kept token)."""
        found = self._pending_memo.get(state_id)
        if found is None:
            # No lock: the value is a function of the interned state, so two threads store the same one.
            found = self._pending_memo[state_id] = self.table.has_pending_bytes(self._states[state_id])
        return found

    def lookback(self, state_id: int) -> tuple[int, ...]:
        """Per stream, how many of the latest symbols a future match could still start in (memoised per
        state, like :meth:`has_pending_bytes`; all zeros after most prose tokens)."""
        found = self._lookback_memo.get(state_id)
        if found is None:
            found = self._lookback_memo[state_id] = self.table.lookback(self._states[state_id])
        return found

    def root_candidates(self, stream: int, nodes: set[int]) -> Iterator[int]:
        """Token ids whose text, read from the text start, ends with the string of one of ``nodes``
        (Aho–Corasick streams; none for a regex stream, whose hits get no retry bans).

        That is the failure-link subtree of each node (every node whose suffix chain passes through it),
        looked up in the root sweep. From other states the same tokens are a superset of those that end
        there; callers verify with :meth:`transition`. Without a sweep (``lazy``), a superset: the tokens
        whose normalised text contains the text of one of ``nodes``.
        """
        if self.automata[stream].regex:
            return
        if self.sweep is None:
            index = TokenTextIndex.for_vocab(self.vocab)
            texts = self.table.node_texts(stream)
            case_sensitive = self.automata[stream].case_sensitive
            found = [index.containing(texts[node], case_sensitive) for node in nodes if texts[node]]
            yield from token_set(*found).tolist()
            return
        children, tokens_at = self._candidate_index(stream)
        stack, seen = list(nodes), set()
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            yield from tokens_at.get(node, ())
            stack.extend(children[node])

    def _candidate_index(self, stream: int) -> tuple[list[list[int]], dict[int, list[int]]]:
        index = self._candidate_indexes.get(stream)
        if index is not None:
            return index
        with self._lock:
            index = self._candidate_indexes.get(stream)
            if index is None:
                index = self._candidate_indexes[stream] = self.table.candidate_index(stream)
            return index

    # -- transitions --------------------------------------------------------------------------------
    def transition(self, state_id: int, token_id: int) -> Transition:
        """The effect of ``token_id`` from ``state_id`` (memoised).

        Raises:
            IndexError: if ``token_id`` is outside the vocab.
        """
        found = self._memo[state_id].get(token_id)  # the fast path: no lock
        if found is not None:
            return found
        data = self.vocab.token_bytes[token_id]
        with self._lock:
            row = self._memo[state_id]
            found = row.get(token_id)
            if found is None:
                found = self._root_transition(token_id) if state_id == ROOT_STATE else None
                if found is None:
                    found = self._compute(state_id, data)
                if not isinstance(row, DenseRow):  # a dense row is bounded already
                    if self._memo_size >= MEMO_LIMIT:
                        self._forget()
                    self._memo_size += 1
                row[token_id] = found
        return found

    @property
    def memo_rows(self) -> list[MemoRow]:
        """The transition memo, one row per state id (token id -> :class:`Transition`: a ``dict`` of the
        visited pairs, or a swept state's :class:`DenseRow`), for the per-token path to read without a call
        (:class:`~guardrail.matching.token_matcher.TokenMatcher`). Read only: a missing entry is computed by
        :meth:`transition`; the list only grows, so a reference stays valid."""
        return self._memo

    def memoised(self, state_id: int, token_id: int) -> bool:
        """Whether :meth:`transition` of this pair is a memo lookup (visited before), not a computation.

        Raises:
            IndexError: if ``state_id`` was never returned by this artefact.
        """
        row = self._memo[state_id]
        return row[token_id] is not None if isinstance(row, DenseRow) else token_id in row

    def fill_memo(self, state_ids: Iterable[int]) -> int:
        """Memoise, in bulk, every transition from each of ``state_ids`` that a sweep describes exactly (what
        :meth:`transition` would compute on each token's first visit, one at a time). Returns the pairs added.

        Only the states :meth:`sweepable_states` lists take part (the text start; with only plain streams, the
        states with no match in progress: after a word character, after a space, where most tokens of prose are
        read); others, and artefacts without an exact sweep (an obfuscation stream, ``lazy``), add nothing
        (:meth:`ArtefactTable.quiet_step_groups`). A filled state's row becomes a :class:`DenseRow` (never
        cleared, outside :data:`MEMO_LIMIT`). ~0.05 s per state for SmolLM2's 49,152 ids, ~0.3 s for Gemma 3's
        262,144 (2 cores). Thread-safe; :func:`~guardrail.matching.memo_warmup.warm_memo` calls it.

        Raises:
            IndexError: if a state id was never returned by this artefact.
        """
        table = self.table
        ids = list(state_ids)
        states = [self._states[state_id] for state_id in ids]
        # Decoded once for every state swept from its flags (the text start reads the stored sweep).
        texts = (root_texts(self.vocab.token_bytes)
                 if any(s != table.root_state and table.sweepable(s) for s in states) else None)
        total = 0
        for state_id, state in zip(ids, states):
            if isinstance(self._memo[state_id], DenseRow):
                continue
            groups = table.quiet_step_groups(state, texts)
            with self._lock:
                row = self._memo[state_id]
                if not groups:
                    continue
                dense = DenseRow(row.get(token_id) for token_id in range(len(self.vocab)))
                for step, token_ids in groups:
                    transition = self._transition(step)
                    for token_id in token_ids.tolist():
                        dense[token_id] = transition  # equal to a visited pair's: the sweep is exact
                added = sum(transition is not None for transition in dense) - len(row)
                self._memo[state_id] = dense
                self._memo_size -= len(row)
            total += added
        return total

    def sweepable_states(self) -> list[int]:
        """Interned states :meth:`fill_memo` can fill (:meth:`ArtefactTable.sweepable`): the text start, and with
        only plain streams, the states with no match in progress (after a word character, after a space)."""
        sweepable = self.table.sweepable
        return [state_id for state_id, state in enumerate(list(self._states)) if sweepable(state)]

    def finish(self, state_id: int) -> Transition:
        """End of text: flush an unfinished UTF-8 character (as U+FFFD), close word boundaries and
        confirm pending allow-term decisions."""
        found = self._finish_memo.get(state_id)
        if found is None:
            with self._lock:
                found = self._finish_memo.get(state_id)
                if found is None:
                    found = self._finish_memo[state_id] = self._compute(state_id, b"", final=True)
        return found

    def _forget(self) -> None:
        """Clear the visited pairs of every state but the text start (swept :class:`DenseRow` rows stay)."""
        for row in self._memo[1:]:
            if not isinstance(row, DenseRow):
                row.clear()
        root = self._memo[0]
        self._memo_size = 0 if isinstance(root, DenseRow) else len(root)

    def _compute(self, state_id: int, data: bytes, final: bool = False) -> Transition:
        """A transition computed by the table, its next state interned. Call with the lock held."""
        return self._transition(self.table.step(self._states[state_id], data, final))

    def _root_transition(self, token_id: int) -> Transition | None:
        """A root transition from the sweep arrays, or ``None`` when it must be computed. Call with the lock
        held."""
        step = self.table.root_step(token_id)
        return None if step is None else self._transition(step)

    def _transition(self, step: Step) -> Transition:
        next_state = ROOT_STATE if step.state is None else self._intern(step.state)
        return Transition(next_state, step.hits, step.symbols, step.lead, self.quiet(next_state))

    def quiet(self, state_id: int) -> bool:
        """No match in progress on any stream and no pending bytes in ``state_id`` (see
        :attr:`Transition.quiet`)."""
        return not any(self.lookback(state_id)) and not self.has_pending_bytes(state_id)

    # -- the mask primitive -------------------------------------------------------------------------
    def completing_tokens(self, state_id: int) -> np.ndarray:
        """``int64[k]``, sorted: the token ids whose transition from ``state_id`` completes a match (memoised).

        Exactly ``{t : transition(state_id, t).hits}``, found without a vocab sweep: candidates come from
        the per-vocab :class:`~guardrail.matching.token_text.TokenTextIndex` and are verified with
        :meth:`transition`, in three groups:

        1. a match that begins inside the token: the tokens whose text from the text start completes or
           suspends a match (the root sweep's inexact entries; without a sweep, the tokens whose text
           contains a term) — a superset from any state without pending UTF-8 bytes;
        2. a match in progress: for every node on the state's failure chain and every pattern through it,
           the tokens whose text begins with the rest of the pattern (prefix search); when only a word
           term's right boundary is left, every token whose first character is a non-word character
           completes it — that class is exact by construction and is taken without verification;
        3. a state ending inside a UTF-8 character: also the tokens that begin with a continuation byte.

        Regex streams (:mod:`guardrail.matching.regex.tokens`): group 1 holds the tokens whose text has a
        piece every match of a regex term must hold (verified); a match in progress is followed through the
        sorted token texts from the stream's DFA node, which yields exactly the tokens completing it (taken
        without verification, like the non-word class above).

        Two rare states fall back to verifying every token: an occurrence waiting on an allow-term
        decision (any character that breaks the allow-term confirms it), and a split UTF-8 character
        right after a word term's pending right boundary (U+FFFD is a non-word character).

        Cost per new state: see ``bench/request_terms.py`` (``mask_*``); a memo hit is a dict lookup.

        Raises:
            IndexError: if ``state_id`` was never returned by this artefact.
        """
        found = self._completing.get(state_id)
        if found is None:
            # Obfuscation streams read through a view whose state depends on the text before: no prefix
            # index describes what completes them, so every token is checked (~0.1-0.5 s per new state on
            # SmolLM2; only mask-only engines ask, docs/matching.md).
            found = (self._verified(state_id, np.arange(len(self.vocab.token_bytes), dtype=np.int64))
                     if self.table.viewed else self._compute_completing(state_id))
            with self._lock:
                if len(self._completing) >= COMPLETING_LIMIT:
                    self._completing.clear()
                found = self._completing.setdefault(state_id, found)
        return found

    def _compute_completing(self, state_id: int) -> np.ndarray:
        pending_bytes, *streams = self._states[state_id]
        index = TokenTextIndex.for_vocab(self.vocab)
        everything = np.arange(len(self.vocab.token_bytes), dtype=np.int64)
        continuations = self._continuation_map()
        plain = [(s, a, st) for s, (a, st) in enumerate(zip(self.automata, streams)) if isinstance(a, Automaton)]
        boundary_only = any("" in continuations[s].get(node, ()) for s, automaton, stream in plain
                            for node in automaton.chain(stream.node))
        if any(stream.pending for stream in streams) or (pending_bytes and boundary_only):
            return self._verified(state_id, everything)
        candidates = [self._begin_candidates()]
        sure: list[np.ndarray] = [self.always_banned]
        if pending_bytes:
            candidates.append(index.continuation_first)
        for automaton, state in zip(self.automata, streams):
            if not isinstance(automaton, RegexAutomaton) or isinstance(automaton, ObfuscationAutomaton):
                continue
            found = continuing_tokens(automaton, state.node, state.prev_space, index, bool(pending_bytes))
            if found is None:  # every token that does not continue the split character completes a match
                return self._verified(state_id, everything)
            # After a split character the walk read each token as U+FFFD + its text, which is wrong for
            # the tokens that continue the character: they are checked as candidates instead.
            sure.append(token_difference(found, index.continuation_first) if pending_bytes else found)
        for stream, automaton, state in plain:
            case_sensitive = automaton.case_sensitive
            for node in automaton.chain(state.node):
                for rest in continuations[stream].get(node, ()):
                    if not rest:
                        sure.append(index.nonword_first(case_sensitive))
                        continue
                    candidates.append(index.starting_with(rest, case_sensitive))
                    if state.prev_space:  # a leading space of the token is collapsed into the last one
                        candidates.append(index.starting_with(" " + rest, case_sensitive))
        certain = token_set(*sure)
        pool = token_difference(token_set(*candidates), certain)
        return token_set(certain, self._verified(state_id, pool))

    def _verified(self, state_id: int, candidates: np.ndarray) -> np.ndarray:
        transition = self.transition
        return np.asarray(sorted(t for t in candidates.tolist() if transition(state_id, t).hits), dtype=np.int64)

    def _continuation_map(self) -> list[dict[int, frozenset[str]]]:
        """:meth:`ArtefactTable.continuation_map`, built on first use (two threads may both build it: the
        same value)."""
        found = self._continuations
        if found is None:
            found = self._continuations = self.table.continuation_map()
        return found

    def _begin_candidates(self) -> np.ndarray:
        """Tokens in which a match can begin and complete (a superset, from any state without pending bytes).

        Regex terms without a sweep add the tokens holding the pieces every match must hold
        (:func:`~guardrail.matching.regex.tokens.inside_candidates`); with a sweep, only a regex stream whose
        matches may begin at a token's first character after a word character but not after a non-word
        one (``\\Bx``) needs them: the sweep reads each token after a non-word character."""
        found = self._start_candidates
        if found is None:
            found = self._start_candidates = token_set(*self.table.candidate_parts().values())
        return found

