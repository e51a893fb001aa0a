"""The compiled artefact table: the token-level banned-term automaton for one tokenizer, as built by
:mod:`guardrail.matching.compiler` and stored by :mod:`guardrail.matching.codec`. Immutable once built, so
shared by every thread without a lock; its run-time memo (state ids, memoised transitions, completing tokens)
is :class:`guardrail.matching.artefact.Artefact`, the class every caller uses.

A state here is a tuple ``(utf8_pending_bytes, StreamState, ...)``; :class:`Artefact` interns them as ids.
Streams: the plain terms of each case mode (one Aho–Corasick automaton each), then the regex terms of each
case mode (one :class:`~guardrail.matching.regex.automaton.RegexAutomaton` each), then the obfuscation streams
(one :class:`~guardrail.matching.obfuscation.automaton.ObfuscationAutomaton` per view: the terms whose
obfuscation level is not ``off``, read as the reader sees the text; docs/matching.md, "Obfuscation"). A term
with obfuscation is in its plain stream *and* in an obfuscation stream: either may report it.

The table's methods are pure functions of the table and their arguments (the automata they call cache
internally under their own locks): nothing here is memoised per artefact.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from typing import NamedTuple, TypeAlias

import numpy as np

from guardrail.matching.automaton import BOUNDARY, Automaton, StreamState, symbol_pattern
from guardrail.matching.normalize import compose_held, holds_for_composition
from guardrail.matching.obfuscation import ObfuscationLevel
from guardrail.matching.obfuscation.automaton import ObfuscationAutomaton, compile_obfuscation_stream
from guardrail.matching.obfuscation.nfa import ObfuscatedTerm, ObfuscationNfa
from guardrail.matching.regex.automaton import MAX_REGEX_DFA_STATES, RegexAutomaton, compile_regex_stream
from guardrail.matching.regex.tokens import inside_candidates
from guardrail.matching.root_sweep import sweep_automaton
from guardrail.matching.term_spec import AllowSpec, TermSpec
from guardrail.matching.token_text import TokenTextIndex, token_set
from guardrail.matching.vocab import TokenVocab
from guardrail.wordlists.wordlist import MatchMode

__all__ = ["LAZY_REGEX_ALWAYS_BANNED_CANDIDATES", "ArtefactTable", "RootSweep", "Step", "StreamAutomaton",
           "decode_utf8", "root_texts"]

#: A stream of the artefact: the plain terms of one case mode (Aho–Corasick over symbols with boundaries) or
#: its regex terms (a DFA over normalised characters). Both have ``feed``, ``finish``, ``fresh``,
#: ``completes_inside``, ``depth``, ``num_nodes`` and ``case_sensitive``; ``regex`` tells them apart.
StreamAutomaton: TypeAlias = Automaton | RegexAutomaton | ObfuscationAutomaton


#: Without a sweep (request terms), the always-banned tokens of a regex stream are looked for only among at
#: most this many candidates (each check ~10-20 us: <= ~40 ms before the first token). A pattern made of
#: classes (``\\w{2}\\d``) can have 100k candidates on Gemma 3's vocab (~1-2 s to check); its always-banned
#: set is then left empty. Always-banned ids are only a shortcut (masked at every step instead of caught and
#: rolled back): the matcher still catches every such token, and ``completing_tokens`` stays exact.
LAZY_REGEX_ALWAYS_BANNED_CANDIDATES = 2_000


class Step(NamedTuple):
    """The effect of some bytes from a state tuple (:meth:`ArtefactTable.step`); :class:`Artefact` turns it
    into a :class:`~guardrail.matching.artefact.Transition` (the same fields, with the next state's id).

    Attributes:
        state: the next state tuple (``None`` at the end of text: the next state is the text start).
        hits, symbols, lead: as :class:`~guardrail.matching.artefact.Transition`.
    """

    state: tuple | None
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


def decode_utf8(pending: bytes, data: bytes, final: bool = False) -> tuple[str, bytes]:
    """Incremental UTF-8 decoding with U+FFFD replacement, as ``bytes.decode(errors="replace")`` does, and
    with the composition the normalisation needs across characters (``normalize.compose_held``).

    Returns:
        ``(text, rest)``: the characters decoded, and the bytes held for the next call: the trailing bytes of
        an unfinished character, preceded, unless ``final``, by a last character that may still compose with
        the next one (a halfwidth katakana before its voiced mark). ``pending`` is such a ``rest``.
    """
    if not pending and not final:
        try:
            text, rest = data.decode("utf-8"), b""
        except UnicodeDecodeError:
            text, rest = _decode(data, final)
    else:
        text, rest = _decode(pending + data, final)
    if pending and text:
        text = compose_held(text)
    if not final and text and holds_for_composition(text[-1]):
        text, rest = text[:-1], text[-1].encode("utf-8") + rest
    return text, rest


def root_texts(token_bytes: Sequence[bytes]) -> tuple[list[str], np.ndarray]:
    """Each token's text as the artefact's incremental decoder reads it from the text start
    (:func:`decode_utf8`: invalid bytes as U+FFFD; an unfinished trailing
    UTF-8 character, and a last character that may still compose with the next, held back).

    Returns:
        ``(texts, pending)``: the decoded texts, and ``uint8[len(token_bytes)]`` the bytes held back per token.
    """
    texts: list[str] = []
    pending = np.zeros(len(token_bytes), dtype=np.uint8)
    for token_id, data in enumerate(token_bytes):
        try:
            text = data.decode("utf-8")
            if text and holds_for_composition(text[-1]):
                text, rest = decode_utf8(b"", data)
                pending[token_id] = len(rest)
        except UnicodeDecodeError:
            text, rest = decode_utf8(b"", data)
            pending[token_id] = len(rest)
        texts.append(text)
    return texts, pending


def _decode(data: bytes, final: bool) -> tuple[str, bytes]:
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    text = decoder.decode(data, final)
    return text, decoder.getstate()[0]



class ArtefactTable:
    """Token-level automaton for one vocab and one set of terms: the compiled, immutable part of an
    :class:`~guardrail.matching.artefact.Artefact` (the arguments are the same).

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
            :data:`~guardrail.matching.regex.automaton.MAX_REQUEST_REGEX_DFA_STATES`).
        obfuscation_nfas: the NFAs of the obfuscation streams, in stream order, when read from a stored
            artefact (built from the terms otherwise).

    Attributes:
        root_state: the state tuple of the text start.
        sweep: the root sweep (``None`` when ``lazy``).
        always_banned: ``int64[k]`` token ids whose own text completes a term from any state.
        begin_candidates: without a sweep, the tokens in which a match can begin (computed with the
            always-banned tokens); ``None`` with a sweep (the memo computes them on first use).

    Raises:
        WordListError: the regex terms of a case mode need more automaton states than the limits allow
            (:func:`~guardrail.matching.regex.automaton.compile_regex_stream`), naming the list and the term.
        ValueError: ``obfuscation_nfas`` does not have one NFA per obfuscation stream.
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
        self.viewed = tuple(s for s, a in enumerate(self.automata) if isinstance(a, ObfuscationAutomaton))
        self.root_state: tuple = (b"",) + tuple(a.fresh(False) for a in self.automata)
        self.begin_candidates: np.ndarray | None = None
        self.lazy = lazy and sweep is None
        if self.lazy:
            self.sweep: RootSweep | None = None
            self.always_banned = self._lazy_always_banned()
        else:
            self.sweep = sweep if sweep is not None else self.sweep_root()
            self.always_banned = self.sweep.always_banned

    # -- states ---------------------------------------------------------------------------------------
    def has_pending_bytes(self, state: tuple) -> bool:
        """Whether the text so far ends inside a UTF-8 character, or with characters an obfuscation view has
        not emitted yet (both make the boundary unclean: nothing before it is released, and a match that
        begins with such a character rolls back to where its first byte is)."""
        if state[0]:
            return True
        return any(self.automata[s].buffered(state[s + 1]) for s in self.viewed)  # type: ignore[union-attr]

    def lookback(self, state: tuple) -> tuple[int, ...]:
        """Per stream, how many of the latest symbols a future match could still start in."""
        return tuple(a.depth[s.node] for a, s in zip(self.automata, state[1:]))


    def node_texts(self, stream: int) -> dict[int, str]:
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


    def candidate_index(self, stream: int) -> tuple[list[list[int]], dict[int, list[int]]]:
        """Of an Aho–Corasick ``stream``, with a sweep: the failure-link children of each node, and the
        tokens whose root-sweep node is each node (what ``root_candidates`` walks)."""
        assert self.sweep is not None, "a candidate index reads the root sweep"
        automaton = self.automata[stream]
        assert isinstance(automaton, Automaton)
        children: list[list[int]] = [[] for _ in range(automaton.num_nodes)]
        for node in range(1, automaton.num_nodes):
            children[automaton.fail[node]].append(node)
        nodes = self.sweep.node[stream]
        order = np.argsort(nodes, kind="stable")
        values, first = np.unique(nodes[order], return_index=True)
        bounds = list(first[1:]) + [len(order)]
        tokens_at = {int(v): order[a:b].tolist() for v, a, b in zip(values, first, bounds) if v}
        return children, tokens_at

    # -- transitions --------------------------------------------------------------------------------
    def step(self, source: tuple, data: bytes, final: bool = False) -> Step:
        """Feed ``data`` (a token's bytes; ``b""`` with ``final`` at the end of text) from the state tuple
        ``source``."""
        pending, *streams = source

        text, rest = decode_utf8(pending, data, final)
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
        return Step(None if final else (rest, *next_streams), tuple(hits), tuple(symbols), tuple(leads))


    def root_step(self, token_id: int) -> Step | None:
        """A root transition rebuilt from the sweep arrays, or ``None`` when it must be computed."""
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
        return Step((rest, *streams), (), symbols, (0,) * len(streams))


    def sweepable(self, state: tuple) -> bool:
        """Whether a sweep can read the vocab from ``state`` (:meth:`quiet_step_groups`): the text start, or, with
        only plain streams, a state with no pending bytes and every stream at its root node."""
        if state == self.root_state:
            return True
        pending, *streams = state
        return (not pending and not self.viewed and all(isinstance(a, Automaton) for a in self.automata)
                and not any(stream.node or stream.pending for stream in streams))

    def quiet_step_groups(self, state: tuple, texts: tuple[list[str], np.ndarray] | None = None
                          ) -> list[tuple[Step, np.ndarray]]:
        """The transitions from ``state`` that a sweep describes exactly, grouped: ``(step, token_ids)`` per
        distinct step, ``token_ids`` ``int64[k]``; for the tokens with no pending UTF-8 bytes (the few that end
        inside a character keep theirs per token: their pending bytes differ token by token) and no match.

        ``state`` is a quiet state: no pending bytes and every stream at its root node. From the text start the
        stored sweep answers (the steps :meth:`root_step` rebuilds one token at a time); from another quiet state
        (after a word character, after a space) every stream is swept from its flags
        (:func:`~guardrail.matching.root_sweep.sweep_automaton`, ~0.05 s on 49,152 ids), which needs every stream
        plain: with a regex or obfuscation stream the answer is empty, as it is without a sweep or from the text
        start of an artefact with an obfuscation stream (it is not swept: no root transition is exact).

        ``texts``: :func:`root_texts` of the vocab, when the caller sweeps several states (decoded here otherwise,
        ~0.2 s on 262,144 ids)."""
        sweep = self.sweep
        if sweep is None or not self.sweepable(state):
            return []
        if state == self.root_state:
            node, symbols, flags, pending_bytes = sweep.node, sweep.symbols, sweep.flags, sweep.pending_bytes
        else:
            decoded, pending_bytes = root_texts(self.vocab.token_bytes) if texts is None else texts
            plain = [a for a in self.automata if isinstance(a, Automaton)]  # all of them (sweepable)
            reads = [sweep_automaton(a, decoded, s.prev_word, s.prev_space) for a, s in zip(plain, state[1:])]
            node, symbols, flags = (np.stack([getattr(read, field) for read in reads])
                                    for field in ("node", "symbols", "flags"))
        ids = np.flatnonzero(np.all(flags & 4, axis=0) & (pending_bytes == 0))
        if not len(ids):
            return []
        num_streams = len(self.automata)
        # One column per token: the fields its Step is made of. Most tokens share one of a few hundred.
        keys = np.concatenate([node[:, ids], flags[:, ids].astype(np.int32), symbols[:, ids]])
        columns, inverse = np.unique(keys, axis=1, return_inverse=True)
        inverse = inverse.reshape(-1)
        order = np.argsort(inverse, kind="stable")
        bounds = np.searchsorted(inverse[order], np.arange(columns.shape[1] + 1))
        groups = []
        for index in range(columns.shape[1]):
            column = columns[:, index].tolist()
            nodes, bits, counts = (column[k * num_streams:(k + 1) * num_streams] for k in range(3))
            after = tuple(StreamState(n, bool(b & 1), bool(b & 2), ()) for n, b in zip(nodes, bits))
            groups.append((Step((b"", *after), (), tuple(counts), (0,) * num_streams),
                           ids[order[bounds[index]:bounds[index + 1]]]))
        return groups

    def sweep_root(self) -> RootSweep:
        """Compute the transitions of every token from the text start (the compiler's main cost).

        A plain stream reads the whole vocab at once (:func:`~guardrail.matching.root_sweep.sweep_automaton`,
        exact: the tokens it cannot read in bulk are fed one by one); a regex stream feeds each token."""
        num_streams = len(self.automata)
        texts, pending_bytes = root_texts(self.vocab.token_bytes)
        shape = (num_streams, len(texts))
        # An obfuscation stream's rows stay 0 (never exact): it is not swept, since its view's state depends on
        # what came before, so its root transitions are computed on first use and no token is always banned by it.
        node = np.zeros(shape, dtype=np.int32)
        symbols = np.zeros(shape, dtype=np.int32)
        flags = np.zeros(shape, dtype=np.uint8)
        hitting = np.zeros(len(texts), dtype=bool)
        for stream, automaton in enumerate(self.automata):
            if stream in self.viewed:
                continue
            if isinstance(automaton, Automaton):
                read = sweep_automaton(automaton, texts)
                node[stream], symbols[stream], flags[stream] = read.node, read.symbols, read.flags
                hitting |= read.hit
                continue
            feed, start = automaton.feed, automaton.fresh(False)
            local: list[tuple[int, int]] = []
            nodes: list[int] = []
            counts: list[int] = []
            bits: list[int] = []
            for token_id, text in enumerate(texts):
                state, count = feed(start, text, local)
                nodes.append(state.node)
                counts.append(count)
                bits.append(state.prev_word | (state.prev_space << 1) | ((not local and not state.pending) << 2))
                if local:
                    hitting[token_id] = True
                    local.clear()
            node[stream], symbols[stream], flags[stream] = nodes, counts, bits
        always = [t for t in np.flatnonzero(hitting).tolist() if self.hits_from_any_state(t)]
        return RootSweep(node, symbols, flags, pending_bytes, np.asarray(always, dtype=np.int64))

    def hits_from_any_state(self, token_id: int) -> bool:
        """Whether the token's own bytes complete a term whatever precedes it.

        Checked from a non-word and from a word context (the only context a match inside the token can
        depend on, besides allow-terms, which disqualify, split UTF-8, which a token starting with a
        continuation byte could complete differently, and, for regex terms, a longer match of earlier text
        delaying the report: :meth:`RegexAutomaton.completes_inside`).
        """
        data = self.vocab.token_bytes[token_id]
        if not data or data[0] & 0xC0 == 0x80:
            return False
        text, _ = decode_utf8(b"", data)
        return all(any(a.completes_inside(text, prev_word) for a in self.automata) for prev_word in (False, True))

    # -- what the mask primitive starts from ----------------------------------------------------------
    def continuation_map(self) -> list[dict[int, frozenset[str]]]:
        """Per stream and trie node, the text still needed to complete each pattern through that node
        (boundary symbols left out; ``""`` when only a right boundary is missing)."""
        found: list[dict[int, frozenset[str]]] = []
        for stream, automaton in enumerate(self.automata):
            rests: dict[int, set[str]] = {}
            if not isinstance(automaton, Automaton):  # regex streams: regex.tokens.continuing_tokens
                found.append({})
                continue
            for term, pattern in enumerate(self.patterns[stream]):
                for depth, node in enumerate(automaton.prefix_nodes[term], start=1):
                    if depth < len(pattern):
                        rests.setdefault(node, set()).add(pattern[depth:].replace(BOUNDARY, ""))
            found.append({node: frozenset(r) for node, r in rests.items()})
        return found

    def candidate_parts(self) -> dict[int, np.ndarray]:
        """The tokens in which a match can begin and complete, in parts: ``-1`` for the sweep's or the plain
        terms', else per regex stream (see :meth:`Artefact._begin_candidates
        <guardrail.matching.artefact.Artefact._begin_candidates>`)."""
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
        parts = self.candidate_parts()
        self.begin_candidates = token_set(*parts.values())
        kept = [part for stream, part in parts.items()
                if stream < 0 or len(part) <= LAZY_REGEX_ALWAYS_BANNED_CANDIDATES]
        return np.asarray([t for t in token_set(*kept).tolist() if self.hits_from_any_state(t)], dtype=np.int64)
