"""The compiled artefact: token-level transitions of the banned-term automaton for one tokenizer.

An :class:`Artefact` is built once per (tokenizer, word-list version) by :mod:`guardrail.matching.compiler`,
shared by every request, and drives :class:`guardrail.matching.token_matcher.TokenMatcher`. A decode step costs
one memoised dictionary lookup; the first visit of a (state, token) pair feeds the token's bytes through
an incremental UTF-8 decoder and the character automata (one per case mode), a few microseconds.

States are interned tuples ``(utf8_pending_bytes, StreamState, ...)``; state id 0 is the text start.
Streams: the plain terms of each case mode (one Aho–Corasick automaton each), then the regex terms of each
case mode (one :class:`~guardrail.matching.regex_automaton.RegexAutomaton` each), then the obfuscation streams
(one :class:`~guardrail.matching.obfuscation_automaton.ObfuscationAutomaton` per view: the terms whose
obfuscation level is not ``off``, read as the reader sees the text; docs/matching.md, "Obfuscation"). A term
with obfuscation is in its plain stream *and* in an obfuscation stream: either may report it.

Thread safety: one artefact is shared by every request of a process. Reads of the memo (the per-step
fast path) take no lock; every write (a new transition, a new state, the lazily built indexes) happens
under the artefact's lock, and a state id is published only after its memo row exists, so a reader
never sees an id it cannot index (issue 8: unguarded, 8 threads on a cold artefact raised IndexError).
"""

from __future__ import annotations

import codecs
import threading
from collections.abc import Iterator, Sequence
from typing import NamedTuple, TypeAlias

import numpy as np

from guardrail.matching.automaton import BOUNDARY, Automaton, StreamState, symbol_pattern
from guardrail.matching.obfuscation import ObfuscationLevel
from guardrail.matching.obfuscation_automaton import ObfuscationAutomaton, compile_obfuscation_stream
from guardrail.matching.obfuscation_nfa import ObfuscatedTerm, ObfuscationNfa
from guardrail.matching.regex_automaton import MAX_REGEX_DFA_STATES, RegexAutomaton, compile_regex_stream
from guardrail.matching.regex_tokens import continuing_tokens, inside_candidates
from guardrail.matching.term_spec import AllowSpec, TermSpec
from guardrail.matching.token_text import TokenTextIndex, token_difference, token_set
from guardrail.matching.vocab import TokenVocab
from guardrail.wordlists.wordlist import MatchMode

#: A stream of the artefact: the plain terms of one case mode (Aho–Corasick over symbols with boundaries) or
#: its regex terms (a DFA over normalised characters). Both have ``feed``, ``finish``, ``fresh``,
#: ``completes_inside``, ``depth``, ``num_nodes`` and ``case_sensitive``; ``regex`` tells them apart.
StreamAutomaton: TypeAlias = Automaton | RegexAutomaton | ObfuscationAutomaton

ROOT_STATE = 0
#: Memoised (state, token) pairs kept before the non-root memo is cleared (bounds a long-lived process).
MEMO_LIMIT = 2_000_000
#: States whose completing tokens are memoised before that memo is cleared (a mask can hold ~100k ids).
COMPLETING_LIMIT = 4096
#: Without a sweep (request terms), the always-banned tokens of a regex stream are looked for only among at
#: most this many candidates (each check ~10-20 us: <= ~40 ms before the first token). A pattern made of
#: classes (``\\w{2}\\d``) can have 100k candidates on Gemma 3's vocab (~1-2 s to check); its always-banned
#: set is then left empty. Always-banned ids are only a shortcut (masked at every step instead of caught and
#: rolled back): the matcher still catches every such token, and ``completing_tokens`` stays exact.
LAZY_REGEX_ALWAYS_BANNED_CANDIDATES = 2_000


class Transition(NamedTuple):
    """The effect of one token from one state.

    Attributes:
        state: the next state id.
        hits: ``(term_id, stream, start)`` per completed match; ``start`` indexes the stream's symbols
            relative to the first symbol this token emitted (negative: the term began in an earlier token).
        symbols: symbols emitted per stream.
        lead: per stream, symbols emitted by the token's first character when that character's first
            bytes came from earlier tokens (split UTF-8); 0 otherwise.
    """

    state: int
    hits: tuple[tuple[int, int, int], ...]
    symbols: tuple[int, ...]
    lead: tuple[int, ...]


class RootSweep(NamedTuple):
    """Transitions from the text start for the whole vocab, as arrays (what the compiler stores).

    Attributes:
        node: ``int32[num_streams, vocab_size]`` automaton node after the token.
        symbols: ``int32[num_streams, vocab_size]`` symbols emitted.
        flags: ``uint8[num_streams, vocab_size]``: bit 0 prev_word, bit 1 prev_space, bit 2 exact
            (no match and no pending allow decision: the arrays describe the transition fully).
        pending_bytes: ``uint8[vocab_size]`` trailing bytes of an unfinished UTF-8 character.
        always_banned: ``int64[k]`` token ids that complete a term by themselves from any state.
    """

    node: np.ndarray
    symbols: np.ndarray
    flags: np.ndarray
    pending_bytes: np.ndarray
    always_banned: np.ndarray


def _decode(pending: bytes, data: bytes, final: bool = False) -> tuple[str, bytes]:
    """Incremental UTF-8 decoding with U+FFFD replacement, as ``bytes.decode(errors="replace")`` does."""
    if not pending and not final:
        try:
            return data.decode("utf-8"), b""
        except UnicodeDecodeError:
            pass
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    decoder.setstate((pending, 0))
    text = decoder.decode(data, final)
    return text, decoder.getstate()[0]


class Artefact:
    """Token-level automaton for one vocab and one set of terms.

    Args:
        vocab: the tokenizer's bytes table (the artefact reads ``vocab.token_bytes``).
        terms: the flattened terms (:func:`guardrail.matching.term_spec.flatten`), regex terms included.
        allows: the allow-terms.
        sweep: precomputed transitions from the text start; computed here when ``None`` (unless ``lazy``).
        lazy: skip the root sweep (request terms): transitions from the text start are computed on demand
            like any other, and the always-banned tokens come from the per-vocab
            :class:`~guardrail.matching.token_text.TokenTextIndex` (candidates by substring, each verified).
            Cost then grows with the terms, not with the vocab.
        regex_states: the DFA-node limit of each regex stream (lower for a request's terms:
            :data:`~guardrail.matching.regex_automaton.MAX_REQUEST_REGEX_DFA_STATES`).
        obfuscation_nfas: the NFAs of the obfuscation streams, in stream order, when read from a stored
            artefact (built from the terms otherwise).

    Raises:
        WordListError: the regex terms of a case mode need more automaton states than the limits allow
            (:func:`~guardrail.matching.regex_automaton.compile_regex_stream`), naming the list and the term.
    """

    def __init__(self, vocab: TokenVocab, terms: Sequence[TermSpec], allows: Sequence[AllowSpec],
                 sweep: RootSweep | None = None, *, lazy: bool = False, regex_states: int = MAX_REGEX_DFA_STATES,
                 obfuscation_nfas: Sequence[ObfuscationNfa] | None = None):
        self.vocab = vocab
        self.terms = tuple(terms)
        self.allows = tuple(allows)
        self.automata: list[StreamAutomaton] = []
        self.global_ids: list[list[int]] = []  # per stream: local term id -> global term id
        self.patterns: list[list[str]] = []  # per stream: symbol pattern per local term id ([] for regex streams)
        self.allow_patterns: list[list[str]] = []  # per stream
        self.stream_of: dict[int, tuple[int, int]] = {}  # global term id -> (stream, local id)
        for case_sensitive in (False, True):
            mine = [t for t in self.terms if t.case_sensitive == case_sensitive and not t.regex]
            if not mine:
                continue
            stream = len(self.automata)
            allow_patterns = [symbol_pattern(a.normalized, MatchMode.SUBSTRING) for a in self.allows
                              if a.case_sensitive == case_sensitive]
            self.patterns.append([symbol_pattern(t.normalized, t.match) for t in mine])
            self.allow_patterns.append(allow_patterns)
            self.automata.append(Automaton(
                self.patterns[-1],
                [t.match is MatchMode.SUBSTRING and bool(allow_patterns) for t in mine],
                allow_patterns,
                case_sensitive))
            self.global_ids.append([t.term_id for t in mine])
            for local, t in enumerate(mine):
                self.stream_of[t.term_id] = (stream, local)
        for case_sensitive in (False, True):
            mine = [t for t in self.terms if t.case_sensitive == case_sensitive and t.regex]
            if not mine:
                continue
            stream = len(self.automata)
            self.automata.append(compile_regex_stream(mine, case_sensitive, regex_states))
            self.patterns.append([])
            self.allow_patterns.append([])
            self.global_ids.append([t.term_id for t in mine])
            for local, t in enumerate(mine):
                self.stream_of[t.term_id] = (stream, local)
        # Obfuscation streams, one per view; a term keeps its plain stream in ``stream_of`` (retry bans).
        views: dict[tuple[bool, bool], list[TermSpec]] = {}
        for t in self.terms:
            if not t.obfuscation.off:
                views.setdefault((t.obfuscation.level >= ObfuscationLevel.SPACED, t.obfuscation.markup), []).append(t)
        if obfuscation_nfas is not None and len(obfuscation_nfas) != len(views):
            raise ValueError(f"{len(obfuscation_nfas)} obfuscation NFAs for {len(views)} obfuscation streams")
        for index, ((spaced, markup), mine) in enumerate(sorted(views.items())):
            obfuscated = tuple(ObfuscatedTerm(t.normalized, t.match, t.obfuscation) for t in mine)
            self.automata.append(compile_obfuscation_stream(obfuscated, spaced, markup) if obfuscation_nfas is None
                                 else ObfuscationAutomaton(obfuscated, spaced, markup, nfa=obfuscation_nfas[index]))
            self.patterns.append([])
            self.allow_patterns.append([])
            self.global_ids.append([t.term_id for t in mine])
        self._viewed = [s for s, a in enumerate(self.automata) if isinstance(a, ObfuscationAutomaton)]
        self._lock = threading.Lock()
        self._states: list[tuple] = []
        self._state_ids: dict[tuple, int] = {}
        self._memo: list[dict[int, Transition]] = []
        self._intern((b"",) + tuple(a.fresh(False) for a in self.automata))
        self._memo_size = 0
        self._finish_memo: dict[int, Transition] = {}
        self._candidate_indexes: dict[int, tuple[list[list[int]], dict[int, list[int]]]] = {}
        self._completing: dict[int, np.ndarray] = {}
        self._continuations: list[dict[int, frozenset[str]]] | None = None
        self._start_candidates: np.ndarray | None = None
        self.lazy = lazy and sweep is None
        if self.lazy:
            self.sweep: RootSweep | None = None
            self._always_banned = self._lazy_always_banned()
        else:
            self.sweep = sweep if sweep is not None else self.sweep_root()
            self._always_banned = self.sweep.always_banned

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
        """Whether the text so far ends inside a UTF-8 character, or with characters an obfuscation view has
        not emitted yet (both make the boundary unclean: nothing before it is released, and a match that
        begins with such a character rolls back to where its first byte is)."""
        state = self._states[state_id]
        if state[0]:
            return True
        return any(self.automata[s].buffered(state[s + 1]) for s in self._viewed)  # type: ignore[union-attr]

    def lookback(self, state_id: int) -> tuple[int, ...]:
        """Per stream, how many of the latest symbols a future match could still start in."""
        return tuple(a.depth[s.node] for a, s in zip(self.automata, self._states[state_id][1:]))

    @property
    def always_banned(self) -> np.ndarray:
        """``int64[k]`` token ids whose own text completes a term from any state (mask them every step)."""
        return self._always_banned

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
            texts = self._node_texts(stream)
            case_sensitive = self.automata[stream].case_sensitive
            found = [index.containing(texts[node], case_sensitive) for node in nodes if texts[node]]
            yield from token_set(*found).tolist()
            return
        children, tokens_at = self._candidate_index(stream, self.sweep)
        stack, seen = list(nodes), set()
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            yield from tokens_at.get(node, ())
            stack.extend(children[node])

    def _node_texts(self, stream: int) -> dict[int, str]:
        """Per automaton node of ``stream``, its string without boundary symbols (the text it stands for)."""
        automaton = self.automata[stream]
        assert isinstance(automaton, Automaton)
        texts: dict[int, str] = {0: ""}
        for pattern in (*self.patterns[stream], *self.allow_patterns[stream]):
            node = 0
            for i, symbol in enumerate(pattern):
                node = automaton.goto[node][symbol]
                texts.setdefault(node, pattern[:i + 1].replace(BOUNDARY, ""))
        return texts

    def _candidate_index(self, stream: int, sweep: RootSweep) -> tuple[list[list[int]], dict[int, list[int]]]:
        index = self._candidate_indexes.get(stream)
        if index is not None:
            return index
        with self._lock:
            index = self._candidate_indexes.get(stream)
            if index is not None:
                return index
            automaton = self.automata[stream]
            assert isinstance(automaton, Automaton)
            children: list[list[int]] = [[] for _ in range(automaton.num_nodes)]
            for node in range(1, automaton.num_nodes):
                children[automaton.fail[node]].append(node)
            nodes = sweep.node[stream]
            order = np.argsort(nodes, kind="stable")
            values, first = np.unique(nodes[order], return_index=True)
            bounds = list(first[1:]) + [len(order)]
            tokens_at = {int(v): order[a:b].tolist() for v, a, b in zip(values, first, bounds) if v}
            index = self._candidate_indexes[stream] = (children, tokens_at)
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
                if self._memo_size >= MEMO_LIMIT:
                    self._forget()
                row[token_id] = found
                self._memo_size += 1
        return found

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
        for row in self._memo[1:]:
            row.clear()
        self._memo_size = len(self._memo[0])

    def _compute(self, state_id: int, data: bytes, final: bool = False) -> Transition:
        pending, *streams = self._states[state_id]
        text, rest = _decode(pending, data, final)
        lead_chars = text[:1] if pending and text else ""
        hits: list[tuple[int, int, int]] = []
        next_streams: list[StreamState] = []
        symbols: list[int] = []
        leads: list[int] = []
        for stream, (automaton, state) in enumerate(zip(self.automata, streams)):
            local: list[tuple[int, int]] = []
            lead = 0
            viewed = isinstance(automaton, ObfuscationAutomaton)
            if lead_chars:
                state, lead = automaton.feed(state, lead_chars, local)
                state, count = automaton.feed(state, text[1:], local, lead)
            elif viewed and text and automaton.buffered(state):  # type: ignore[union-attr]
                # Characters of earlier tokens come out with this token's first one: a match that begins
                # with them rolls back to the token where they were (as a split UTF-8 character).
                state, lead = automaton.feed(state, text[:1], local)
                state, count = automaton.feed(state, text[1:], local, lead)
            else:
                state, count = automaton.feed(state, text, local)
            if final:
                if viewed:
                    count += automaton.finish(state, local, count)  # type: ignore[call-arg]
                else:
                    count += automaton.finish(state, local)
                state = automaton.fresh(False)
            ids = self.global_ids[stream]
            hits.extend((ids[term], stream, start) for term, start in local)
            next_streams.append(state)
            symbols.append(count)
            leads.append(lead)
        next_state = ROOT_STATE if final else self._intern((rest, *next_streams))
        return Transition(next_state, tuple(hits), tuple(symbols), tuple(leads))

    def _root_transition(self, token_id: int) -> Transition | None:
        """Rebuild a root transition from the sweep arrays, or ``None`` when it must be computed."""
        if self.sweep is None:
            return None
        flags = self.sweep.flags[:, token_id]
        if not all(flags & 4):
            return None
        n_pending = int(self.sweep.pending_bytes[token_id])
        rest = self.vocab.token_bytes[token_id][-n_pending:] if n_pending else b""
        streams = tuple(StreamState(int(self.sweep.node[s, token_id]), bool(flags[s] & 1), bool(flags[s] & 2), ())
                        for s in range(len(self.automata)))
        symbols = tuple(int(x) for x in self.sweep.symbols[:, token_id])
        return Transition(self._intern((rest, *streams)), (), symbols, (0,) * len(streams))

    def sweep_root(self) -> RootSweep:
        """Compute the transitions of every token from the text start (the compiler's main cost)."""
        num_streams = len(self.automata)
        node: list[list[int]] = [[] for _ in range(num_streams)]
        symbols: list[list[int]] = [[] for _ in range(num_streams)]
        flags: list[list[int]] = [[] for _ in range(num_streams)]
        pending_bytes: list[int] = []
        hitting: list[int] = []
        # Obfuscation streams are not swept: their view's state depends on what came before, so their root
        # transitions are never exact (computed on first use) and no token is always banned by them.
        swept = [s for s in range(num_streams) if s not in self._viewed]
        feeds = [self.automata[s].feed for s in swept]
        starts = [self.automata[s].fresh(False) for s in swept]
        local: list[tuple[int, int]] = []
        for token_id, data in enumerate(self.vocab.token_bytes):
            try:
                text, rest = data.decode("utf-8"), b""
            except UnicodeDecodeError:
                text, rest = _decode(b"", data)
            pending_bytes.append(len(rest))
            any_hit = False
            for stream, feed, start in zip(swept, feeds, starts):
                state, count = feed(start, text, local)
                node[stream].append(state.node)
                symbols[stream].append(count)
                exact = not local and not state.pending
                flags[stream].append(state.prev_word | (state.prev_space << 1) | (exact << 2))
                if local:
                    any_hit = True
                    local.clear()
            if any_hit:
                hitting.append(token_id)
        always = [t for t in hitting if self._hits_from_any_state(t)]
        shape = (num_streams, len(pending_bytes))

        def rows(per_stream: list[list[int]], dtype: type) -> np.ndarray:
            out: np.ndarray = np.zeros(shape, dtype=dtype)  # an obfuscation stream's row stays 0: never exact
            for s in swept:
                out[s] = per_stream[s]
            return out

        return RootSweep(rows(node, np.int32), rows(symbols, np.int32), rows(flags, np.uint8),
                         np.asarray(pending_bytes, dtype=np.uint8), np.asarray(always, dtype=np.int64))

    def _hits_from_any_state(self, token_id: int) -> bool:
        """Whether the token's own bytes complete a term whatever precedes it.

        Checked from a non-word and from a word context (the only context a match inside the token can
        depend on, besides allow-terms, which disqualify, split UTF-8, which a token starting with a
        continuation byte could complete differently, and, for regex terms, a longer match of earlier text
        delaying the report: :meth:`RegexAutomaton.completes_inside`).
        """
        data = self.vocab.token_bytes[token_id]
        if not data or data[0] & 0xC0 == 0x80:
            return False
        text, _ = _decode(b"", data)
        return all(any(a.completes_inside(text, prev_word) for a in self.automata) for prev_word in (False, True))

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

        Regex streams (:mod:`guardrail.matching.regex_tokens`): group 1 holds the tokens whose text has a
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
                     if self._viewed else self._compute_completing(state_id))
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
        sure: list[np.ndarray] = [self._always_banned]
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
        """Per stream and trie node, the text still needed to complete each pattern through that node
        (boundary symbols left out; ``""`` when only a right boundary is missing)."""
        found = self._continuations
        if found is None:
            found = []
            for stream, automaton in enumerate(self.automata):
                rests: dict[int, set[str]] = {}
                if not isinstance(automaton, Automaton):  # regex streams: regex_tokens.continuing_tokens
                    found.append({})
                    continue
                for term, pattern in enumerate(self.patterns[stream]):
                    for depth, node in enumerate(automaton.prefix_nodes[term], start=1):
                        if depth < len(pattern):
                            rests.setdefault(node, set()).add(pattern[depth:].replace(BOUNDARY, ""))
                found.append({node: frozenset(r) for node, r in rests.items()})
            self._continuations = found
        return found

    def _begin_candidates(self) -> np.ndarray:
        """Tokens in which a match can begin and complete (a superset, from any state without pending bytes).

        Regex terms without a sweep add the tokens holding the pieces every match must hold
        (:func:`~guardrail.matching.regex_tokens.inside_candidates`); with a sweep, only a regex stream whose
        matches may begin at a token's first character after a word character but not after a non-word
        one (``\\Bx``) needs them: the sweep reads each token after a non-word character."""
        found = self._start_candidates
        if found is None:
            found = self._start_candidates = token_set(*self._candidate_parts().values())
        return found

    def _candidate_parts(self) -> dict[int, np.ndarray]:
        """The parts of :meth:`_begin_candidates`: ``-1`` for the sweep's or the plain terms', else per
        regex stream."""
        index = TokenTextIndex.for_vocab(self.vocab)
        if self.sweep is not None:
            parts = {-1: np.flatnonzero((self.sweep.flags & 4 == 0).any(axis=0)).astype(np.int64)}
        else:
            parts = {-1: token_set(*(index.containing(t.normalized, t.case_sensitive)
                                     for t in self.terms if not t.regex))}
        for stream, automaton in enumerate(self.automata):
            if isinstance(automaton, ObfuscationAutomaton):
                continue
            if isinstance(automaton, RegexAutomaton) and (self.sweep is None or automaton.word_context_starts):
                patterns = [self.terms[term].normalized for term in self.global_ids[stream]]
                parts[stream] = inside_candidates(patterns, index, automaton.case_sensitive)
        return parts

    def _lazy_always_banned(self) -> np.ndarray:
        """Always-banned tokens without a sweep: those containing a term, verified one by one; a regex
        stream's candidates only up to :data:`LAZY_REGEX_ALWAYS_BANNED_CANDIDATES`."""
        parts = self._candidate_parts()
        self._start_candidates = token_set(*parts.values())
        kept = [part for stream, part in parts.items()
                if stream < 0 or len(part) <= LAZY_REGEX_ALWAYS_BANNED_CANDIDATES]
        return np.asarray([t for t in token_set(*kept).tolist() if self._hits_from_any_state(t)], dtype=np.int64)
