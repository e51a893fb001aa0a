"""Two artefacts stepped as one: the stored lists' artefact and a request's own terms, combined at run time.

A request's terms are compiled on their own in milliseconds
(:func:`guardrail.matching.compiler.compile_request_artefact`) instead of recompiling the stored lists with
them over the whole vocab; :class:`CombinedArtefact` is the product automaton of the two, with the API
:class:`~guardrail.matching.token_matcher.TokenMatcher` and the guard session use, so neither needs to know.

A combined state is the pair of component states, interned; term ids and stream indexes of the second
artefact follow those of the first (``terms`` is the same table a joint compile of
``first + second`` lists would have). The memo is safe under concurrent requests as in
:class:`~guardrail.matching.artefact.Artefact`: lock-free reads, writes under a lock.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from typing import TypeAlias

import numpy as np

from guardrail.matching.artefact import (
    COMPLETING_LIMIT,
    MEMO_LIMIT,
    ROOT_STATE,
    Artefact,
    StreamAutomaton,
    Transition,
)
from guardrail.matching.automaton import StreamState
from guardrail.matching.token_text import token_set


class CombinedArtefact:
    """The product of two artefacts over the same vocab; a match of either is a match.

    Args:
        first: usually the stored lists' (cached, swept) artefact.
        second: usually the request's terms (:func:`~guardrail.matching.compiler.compile_request_artefact`).

    Raises:
        ValueError: if the two were compiled for different vocabs.
    """

    def __init__(self, first: Artefact, second: Artefact):
        if first.vocab.fingerprint != second.vocab.fingerprint:
            raise ValueError("second: compiled for another vocab than first (fingerprints differ)")
        self.first, self.second = first, second
        self.vocab = first.vocab
        self._term_offset = len(first.terms)
        self._stream_offset = len(first.automata)
        self.terms = first.terms + tuple(dataclasses.replace(t, term_id=t.term_id + self._term_offset)
                                         for t in second.terms)
        self.allows = first.allows + tuple(a for a in second.allows if a not in first.allows)
        self.automata: list[StreamAutomaton] = [*first.automata, *second.automata]
        self.stream_of = dict(first.stream_of)
        for term_id, (stream, local) in second.stream_of.items():
            self.stream_of[term_id + self._term_offset] = (stream + self._stream_offset, local)
        self._always_banned = token_set(first.always_banned, second.always_banned)
        self._lock = threading.Lock()
        self._pairs: list[tuple[int, int]] = [(ROOT_STATE, ROOT_STATE)]
        self._pair_ids: dict[tuple[int, int], int] = {(ROOT_STATE, ROOT_STATE): ROOT_STATE}
        self._memo: list[dict[int, Transition]] = [{}]
        self._memo_size = 0
        self._finish_memo: dict[int, Transition] = {}
        self._completing: dict[int, np.ndarray] = {}
        self._lookback_memo: dict[int, tuple[int, ...]] = {}  # per combined state id (never cleared)

    @property
    def num_states(self) -> int:
        """Combined states interned so far."""
        return len(self._pairs)

    @property
    def always_banned(self) -> np.ndarray:
        """``int64[k]`` sorted: tokens always banned by either artefact."""
        return self._always_banned

    def stream_states(self, state_id: int) -> tuple[StreamState, ...]:
        a, b = self._pairs[state_id]
        return self.first.stream_states(a) + self.second.stream_states(b)

    def has_pending_bytes(self, state_id: int) -> bool:
        """Whether the text so far ends inside a UTF-8 character (both components see the same bytes), or with
        characters either component's obfuscation view has not emitted yet (the components' levels may
        differ: a request's own terms at the default level beside lists at ``off``)."""
        a, b = self._pairs[state_id]
        return self.first.has_pending_bytes(a) or self.second.has_pending_bytes(b)

    def lookback(self, state_id: int) -> tuple[int, ...]:
        """The components' lookbacks, one after the other (memoised per combined state)."""
        found = self._lookback_memo.get(state_id)
        if found is None:
            a, b = self._pairs[state_id]
            found = self._lookback_memo[state_id] = self.first.lookback(a) + self.second.lookback(b)
        return found

    def root_candidates(self, stream: int, nodes: set[int]) -> Iterator[int]:
        """As :meth:`Artefact.root_candidates`, for a combined stream index."""
        if stream < self._stream_offset:
            return self.first.root_candidates(stream, nodes)
        return self.second.root_candidates(stream - self._stream_offset, nodes)

    @property
    def memo_rows(self) -> list[dict[int, Transition]]:
        """The transition memo, one dict per state id (token id -> :class:`Transition`), for the per-token
        path to read without a call (:class:`~guardrail.matching.token_matcher.TokenMatcher`). Read only: a
        missing entry is computed by :meth:`transition`; the list only grows, so a reference stays valid."""
        return self._memo

    def transition(self, state_id: int, token_id: int) -> Transition:
        """The effect of ``token_id`` from ``state_id`` (memoised; see :meth:`Artefact.transition`).

        Raises:
            IndexError: if ``token_id`` is outside the vocab.
        """
        found = self._memo[state_id].get(token_id)
        if found is not None:
            return found
        a, b = self._pairs[state_id]
        found = self._join(self.first.transition(a, token_id), self.second.transition(b, token_id))
        with self._lock:
            row = self._memo[state_id]
            if self._memo_size >= MEMO_LIMIT:
                for other in self._memo[1:]:
                    other.clear()
                self._memo_size = len(self._memo[0])
            found = row.setdefault(token_id, found)
            self._memo_size += 1
        return found

    def memoised(self, state_id: int, token_id: int) -> bool:
        """Whether :meth:`transition` of this pair is a lookup in this product's memo (see
        :meth:`Artefact.memoised`)."""
        return token_id in self._memo[state_id]

    def finish(self, state_id: int) -> Transition:
        """End of text in both components (see :meth:`Artefact.finish`)."""
        found = self._finish_memo.get(state_id)
        if found is None:
            a, b = self._pairs[state_id]
            found = self._join(self.first.finish(a), self.second.finish(b))
            with self._lock:
                found = self._finish_memo.setdefault(state_id, found)
        return found

    def completing_tokens(self, state_id: int) -> np.ndarray:
        """``int64[k]`` sorted: tokens that complete a match of either component (memoised)."""
        found = self._completing.get(state_id)
        if found is None:
            a, b = self._pairs[state_id]
            found = token_set(self.first.completing_tokens(a), self.second.completing_tokens(b))
            with self._lock:
                if len(self._completing) >= COMPLETING_LIMIT:
                    self._completing.clear()
                found = self._completing.setdefault(state_id, found)
        return found

    def _join(self, one: Transition, two: Transition) -> Transition:
        hits = one.hits + tuple((term + self._term_offset, stream + self._stream_offset, start)
                                for term, stream, start in two.hits)
        return Transition(self._intern((one.state, two.state)), hits, one.symbols + two.symbols, one.lead + two.lead,
                          one.quiet and two.quiet)

    def _intern(self, pair: tuple[int, int]) -> int:
        state_id = self._pair_ids.get(pair)
        if state_id is None:
            with self._lock:
                state_id = self._pair_ids.get(pair)
                if state_id is None:
                    state_id = len(self._pairs)
                    self._memo.append({})  # row first, then the id: see Artefact._intern
                    self._pairs.append(pair)
                    self._pair_ids[pair] = state_id
        return state_id


#: What the token matcher, the guard session and the engines step: one compiled artefact, or the stored
#: lists' artefact combined with a request's terms. Both offer the same stepping API (``transition``,
#: ``finish_transition``, ``completing_tokens``, ``terms``, ``always_banned``, ...).
ArtefactLike: TypeAlias = Artefact | CombinedArtefact
