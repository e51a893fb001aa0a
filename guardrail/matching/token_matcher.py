"""Per-request cursor over an :class:`~guardrail.matching.artefact.Artefact`: what the decoder steps token by token.

The matcher keeps, for every pushed token, the automaton state after it and the cumulative symbol
count of each stream, so that it can

* say where a completed term *began* (the rollback target), split UTF-8 included;
* roll back in O(1) (:meth:`TokenMatcher.rollback_to` drops the tail of its stacks);
* say how many leading tokens no future match can start in (:meth:`TokenMatcher.releasable`), which is
  what hold-back streaming releases.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

from guardrail.matching.artefact import ROOT_STATE, Transition
from guardrail.matching.automaton import Automaton
from guardrail.matching.combined import ArtefactLike

#: A retry ban covers tokens that begin the rolled-back term at least this many characters deep
#: (or half the term): shorter prefixes also begin innocent words ("so" for "sorry").
MIN_RETRY_PREFIX_CHARS = 3


@dataclass(frozen=True)
class Hit:
    """A banned term completed by a candidate token.

    Attributes:
        term_id: index in ``artefact.terms``.
        list_name: the word list of the term.
        term: the term as written in its list.
        start_token: index (among pushed tokens; ``len(matcher)`` = the candidate itself) of the token
            where the term began: roll back to it and ban ``first_token`` there.
        first_token: the token id at ``start_token`` (the candidate's id when it began the term).
        stream: which case-mode stream matched (internal; used by :meth:`TokenMatcher.retry_bans`).
        depth: symbols of the term's pattern that ``first_token`` covered.
    """

    term_id: int
    list_name: str
    term: str
    start_token: int
    first_token: int
    stream: int
    depth: int


class TokenMatcher:
    """Steps an artefact over generated tokens.

    Args:
        artefact: the compiled terms for the model's vocab.
        tokens: the list the matcher keeps the pushed ids in (default: a new one). A caller that keeps the
            same ids (a :class:`~guardrail.guard.session.GuardSession`) passes its own and never appends to
            it itself: one list per request instead of two, one list fewer for each token to touch.

    Example:
        >>> m = TokenMatcher(artefact)
        >>> for token in ids:
        ...     hit = m.push(token)
        ...     if hit: m.rollback_to(hit.start_token); break
    """

    def __init__(self, artefact: ArtefactLike, tokens: list[int] | None = None):
        self.artefact = artefact
        self._transition = artefact.transition  # bound once: push runs per generated token
        # The artefact's memo, read directly on the hot path (a hit costs no call into the artefact). After a
        # forward pass evicts the CPU caches, each object a token touches costs a miss, so the per-token work
        # touches as few as it can: the current state is an attribute, not a list of every state.
        self._memo_rows = artefact.memo_rows
        self._state = ROOT_STATE
        if tokens is not None and tokens:
            raise ValueError("a shared token list must start empty")
        self._tokens: list[int] = [] if tokens is None else tokens
        # One record per pushed token (its transition: next state, symbols, lead, quiet); the per-stream
        # cumulative symbol counts are derived from it only when a match is in progress or found (_count),
        # since most prose tokens are quiet and need none: one append per token instead of one per stream
        # and field.
        self._trail: list[Transition] = []
        streams = len(artefact.automata)
        self._cumulative: list[list[int]] = [[0] for _ in range(streams)]
        self._counted = 0  # tokens whose counts _cumulative holds

    def __len__(self) -> int:
        return len(self._tokens)

    @property
    def tokens(self) -> list[int]:
        """Token ids pushed so far (a copy)."""
        return list(self._tokens)

    @property
    def state(self) -> int:
        """The artefact's state id after the pushed tokens (``ROOT_STATE`` before any)."""
        return self._state

    def push(self, token_id: int) -> Hit | None:
        """Append ``token_id`` unless it completes a banned term.

        Returns:
            ``None`` when the token was appended; otherwise the :class:`Hit` (the token is *not*
            appended; when several terms complete, the one that began earliest).
        """
        state = self._state
        transition = self._memo_rows[state].get(token_id)
        if transition is None:
            transition = self._transition(state, token_id)
        if transition.hits:
            return self._earliest_hit(transition, token_id)
        self._state = transition.state
        self._trail.append(transition)
        self._tokens.append(token_id)
        return None

    def advance(self, token_id: int) -> Hit | int:
        """:meth:`push` and then :meth:`releasable`, in one call (the per-token path of a guarded session).

        Returns:
            the :class:`Hit` (the token is not appended), or the releasable count after the token.
        """
        # push's body, repeated rather than called: this runs once per row and step in every batch, where a
        # Python call more is a measurable share of the guard's time (docs/benchmarks.md).
        state = self._state
        transition = self._memo_rows[state].get(token_id)
        if transition is None:
            transition = self._transition(state, token_id)
        if transition.hits:
            return self._earliest_hit(transition, token_id)
        self._state = transition.state
        self._trail.append(transition)
        tokens = self._tokens
        tokens.append(token_id)
        return len(tokens) if transition.quiet else self.releasable()

    def finish(self) -> Hit | None:
        """End of text: a ``word`` term at the very end, or a pending allow-term decision, may match."""
        transition = self.artefact.finish(self._state)
        return self._earliest_hit(transition, None) if transition.hits else None

    def completing_tokens(self):
        """``int64[k]`` sorted token ids that would complete a match if pushed now (the mask primitive).

        Masking them is all a mask-only engine can do; see :meth:`Artefact.completing_tokens` (memoised
        per automaton state, so a step that revisits a state costs a dict lookup).
        """
        return self.artefact.completing_tokens(self._state)

    def rollback_to(self, length: int) -> None:
        """Roll back to the state after the first ``length`` pushed tokens.

        Raises:
            ValueError: if ``length`` is negative or larger than the number of pushed tokens.
        """
        if not 0 <= length <= len(self._tokens):
            raise ValueError(f"length must be in [0, {len(self._tokens)}], got {length}")
        del self._tokens[length:]
        del self._trail[length:]
        self._state = self._trail[-1].state if length else ROOT_STATE
        if self._counted > length:
            self._counted = length
            for cumulative in self._cumulative:
                del cumulative[length + 1:]

    def releasable(self) -> int:
        """How many leading tokens no future match can start in (safe to send to the client)."""
        limit = len(self._tokens)
        if limit and self._trail[-1].quiet:  # most prose tokens: no match in progress, a clean boundary
            return limit
        lookback = self.artefact.lookback(self._state)
        if any(lookback):
            self._count()
            for cumulative, back in zip(self._cumulative, lookback):
                if back:  # 0: every token so far is outside a match of this stream
                    # Tokens [0, r) end at or before the earliest symbol a match can still start at.
                    limit = min(limit, bisect_right(cumulative, cumulative[-1] - back) - 1)
        return self._clean_boundary(limit)

    def retry_bans(self, hit: Hit) -> set[int]:
        """Token ids to ban at ``hit.start_token`` besides ``hit.first_token`` after rolling back.

        The model tends to retry a rolled-back term in another casing or split (" Sorry", " SOR"+"RY").
        Each retry that spans tokens costs forward passes, so every token that would begin the same term
        at least as deep as the banned one did is banned with it — but never one covering less than half
        the term or fewer than :data:`MIN_RETRY_PREFIX_CHARS` symbols, since short prefixes begin innocent
        words too ("so" for "sorry"). Call it *after* :meth:`rollback_to` ``hit.start_token``.

        A regex term gets none: it has no one spelling whose prefixes could be listed, and a prefix of one
        of its matches may begin innocent text as easily ("s" for ``s[o0]rry``). Its first token is banned
        at the position, and every retry is caught by the matcher again (docs/matching.md).
        """
        artefact = self.artefact
        automaton = artefact.automata[hit.stream]
        if not isinstance(automaton, Automaton):
            return set()
        prefix_nodes = automaton.prefix_nodes[artefact.stream_of[hit.term_id][1]]
        length = len(prefix_nodes)
        threshold = max(hit.depth, MIN_RETRY_PREFIX_CHARS, (length + 1) // 2)
        # Proper prefixes only: a token completing the term is caught by the matcher at no cost.
        wanted = set(prefix_nodes[threshold - 1:length - 1])
        if not wanted:
            return set()
        state = self._state
        bans: set[int] = set()
        for token_id in artefact.root_candidates(hit.stream, wanted):
            transition = artefact.transition(state, token_id)
            if transition.hits:
                bans.add(token_id)
                continue
            node = artefact.stream_states(transition.state)[hit.stream].node
            emitted = transition.symbols[hit.stream]
            if any(n in wanted and automaton.depth[n] <= emitted for n in automaton.chain(node)):
                bans.add(token_id)
        bans.discard(hit.first_token)
        return bans

    # -- internals ----------------------------------------------------------------------------------
    def _count(self) -> None:
        """Bring the per-stream cumulative symbol counts up to every pushed token."""
        trail, counted = self._trail, self._counted
        if counted == len(trail):
            return
        for stream, cumulative in enumerate(self._cumulative):
            total = cumulative[-1]
            for transition in trail[counted:]:
                total += transition.symbols[stream]
                cumulative.append(total)
        self._counted = len(trail)

    def _clean_boundary(self, token: int) -> int:
        """The last boundary at or before ``token`` with no UTF-8 character (or obfuscation-view character)
        split across it."""
        trail, pending = self._trail, self.artefact.has_pending_bytes
        while token > 0 and pending(trail[token - 1].state):  # the state after `token` tokens
            token -= 1
        return token

    def _locate(self, transition: Transition, stream: int, start: int) -> tuple[int, int]:
        """``(start_token, depth)`` of a match whose first symbol is ``start`` (relative to the candidate)."""
        here = len(self._tokens)
        if start >= 0:
            token, depth = here, transition.symbols[stream] - start
            if start < transition.lead[stream]:
                # The term begins with the character whose first bytes earlier tokens carried.
                token = self._clean_boundary(here)
            return token, depth
        self._count()
        cumulative = self._cumulative[stream]
        absolute = cumulative[-1] + start
        token = bisect_right(cumulative, absolute) - 1
        depth = cumulative[token + 1] - absolute
        if absolute - cumulative[token] < self._trail[token].lead[stream]:
            token = self._clean_boundary(token)
        return token, depth

    def _earliest_hit(self, transition: Transition, token_id: int | None) -> Hit:
        best: tuple[int, int, int, int] | None = None  # (start_token, depth, term_id, stream)
        for term_id, stream, start in transition.hits:
            token, depth = self._locate(transition, stream, start)
            if best is None or token < best[0]:
                best = (token, depth, term_id, stream)
        if best is None:
            raise ValueError("_earliest_hit needs a transition with at least one hit")
        token, depth, term_id, stream = best
        spec = self.artefact.terms[term_id]
        first = self._tokens[token] if token < len(self._tokens) else token_id
        return Hit(term_id, spec.list_name, spec.text, token, -1 if first is None else first, stream, depth)
