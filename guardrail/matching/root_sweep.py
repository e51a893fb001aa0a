"""The root sweep of a plain (Aho–Corasick) stream over a whole vocab, with numpy instead of a loop per token.

The compiler reads every token from the text start (:meth:`ArtefactTable.sweep_root
<guardrail.matching.artefact_table.ArtefactTable.sweep_root>`). Feeding the 262,144 tokens of Gemma 3 one by one
through :meth:`Automaton.feed <guardrail.matching.automaton.Automaton.feed>` costs ~2 µs of interpreter per token
(~0.6 s); here all tokens advance together, one numpy step per character position, over the automaton's dense
DFA table (``nodes × symbol classes``, filled from the goto and failure links as Aho & Corasick's ``δ``).

Exact by construction: a token is read this way only when its whole reading is the plain case of
:meth:`Automaton.feed` — every character normalises to exactly one character (most do; a default-ignorable one
normalises to none, a ligature to several), and no node it reaches reports a term (then no hit and no allow-term
decision is pending). Every other token is fed by :meth:`Automaton.feed` itself, as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from guardrail.matching.automaton import BOUNDARY, Automaton, StreamState

__all__ = ["RootRead", "dense_table", "sweep_automaton"]

#: One past the largest code point (the size of the per-code-point lookup tables).
_CODE_POINTS = 0x110000


class RootRead(NamedTuple):
    """Every token of a vocab read from the text start by one plain stream (the sweep's rows of the stream).

    Attributes:
        node: ``int32[n]`` automaton node after the token.
        symbols: ``int32[n]`` symbols emitted (characters and boundaries).
        flags: ``uint8[n]``: bit 0 prev_word, bit 1 prev_space, bit 2 exact (no hit, nothing pending).
        hit: ``bool[n]``: the token completes a match (begun inside it).
    """

    node: np.ndarray
    symbols: np.ndarray
    flags: np.ndarray
    hit: np.ndarray


def dense_table(automaton: Automaton) -> tuple[np.ndarray, dict[str, int]]:
    """The automaton's full DFA: ``(int32[nodes, classes], class of each symbol)``; class 0 is every symbol no
    pattern holds (it leads to the root from any node), the others are the patterns' symbols (``BOUNDARY``
    included). Row of a node: its failure node's row, overridden by its own goto edges (fail links point to
    shallower nodes, so rows are filled by depth)."""
    symbols = sorted({symbol for edges in automaton.goto for symbol in edges})
    class_of = {symbol: k for k, symbol in enumerate(symbols, start=1)}
    table = np.zeros((automaton.num_nodes, len(symbols) + 1), dtype=np.int32)
    for symbol, child in automaton.goto[0].items():
        table[0, class_of[symbol]] = child
    for node in sorted(range(1, automaton.num_nodes), key=automaton.depth.__getitem__):
        row = table[node]
        row[:] = table[automaton.fail[node]]
        for symbol, child in automaton.goto[node].items():
            row[class_of[symbol]] = child
    return table, class_of


def sweep_automaton(automaton: Automaton, texts: Sequence[str], prev_word: bool = False,
                    prev_space: bool = False) -> RootRead:
    """Read every text (:func:`~guardrail.matching.artefact_table.root_texts`) from the text start through
    ``automaton``, as ``automaton.feed(automaton.fresh(False), text, hits)`` would (module docstring); or from
    another state with no match in progress: ``StreamState(0, prev_word, prev_space, ())`` (after a word
    character, after a space), which the memo warm-up sweeps too.

    Args:
        automaton: a plain stream's automaton (its DFA memo is not touched).
        texts: per token id, its decoded text.
        prev_word, prev_space: the state read from (both ``False``: the text start).

    Returns:
        The rows of the root sweep for this stream, ``len(texts)`` entries each (:class:`RootRead`).
    """
    n = len(texts)
    lengths = np.fromiter(map(len, texts), dtype=np.int64, count=n)
    joined = "".join(texts)
    points = np.frombuffer(joined.encode("utf-32-le"), dtype=np.uint32)
    owner = np.repeat(np.arange(n, dtype=np.int64), lengths)

    # Per distinct character: its one normalised character (code point), or -1 when it normalises to none or
    # to several (its tokens are fed one by one); and per normalised character, whether it is a word character.
    folded = np.full(_CODE_POINTS, -1, dtype=np.int32)
    word_of = np.zeros(_CODE_POINTS, dtype=bool)
    seen = np.zeros(_CODE_POINTS, dtype=bool)
    seen[points] = True  # (``set(joined)`` would make a string object per character outside Latin-1)
    single = [(p, ord(f[0][0]), f[0][1]) for p in np.flatnonzero(seen).tolist() for f in [automaton.fold(chr(p))]
              if len(f) == 1]
    if single:
        source, target, target_word = np.asarray(single, dtype=np.int64).T
        folded[source] = target
        word_of[target[target_word.astype(bool)]] = True
    chars = folded[points]
    slow = np.zeros(n, dtype=bool)
    slow[owner[chars < 0]] = True
    # Whitespace runs inside a token collapse to one space (from the text start nothing precedes it; after a
    # space the token's leading spaces collapse into that one).
    first = np.cumsum(lengths) - lengths
    space = chars == ord(" ")
    repeated = np.zeros(len(chars), dtype=bool)
    repeated[1:] = space[1:] & space[:-1]
    repeated[first[lengths > 0]] = space[first[lengths > 0]] & prev_space
    keep = ~repeated
    chars, owner = chars[keep], owner[keep]
    lengths = np.bincount(owner, minlength=n).astype(np.int64)
    first = np.cumsum(lengths) - lengths

    table, class_of = dense_table(automaton)
    class_lut = np.zeros(_CODE_POINTS, dtype=np.int32)
    for symbol, k in class_of.items():
        if symbol != BOUNDARY:
            class_lut[ord(symbol)] = k
    safe = np.maximum(chars, 0)
    word = word_of[safe]
    classes = class_lut[safe]
    previous = np.zeros(len(word), dtype=bool)
    previous[1:] = word[:-1]
    previous[first[lengths > 0]] = prev_word  # the text start is a non-word context
    boundary = word != previous

    # All tokens advance together, one character position at a time; sorted longest first, the tokens still
    # reading at position j are a prefix of the order.
    order = np.argsort(-lengths, kind="stable")
    sorted_first, sorted_lengths = first[order], lengths[order]
    node = np.zeros(n, dtype=np.int32)
    reports = np.zeros(n, dtype=bool)
    width = table.shape[1]
    flat = table.ravel()
    boundary_class = class_of.get(BOUNDARY, 0)
    has_output = np.fromiter((bool(out) for out in automaton.outputs), dtype=bool, count=automaton.num_nodes)
    positions = np.arange(int(lengths.max(initial=0)))
    reading = np.searchsorted(-sorted_lengths, -positions, side="left")  # tokens longer than each position
    for position, active in zip(positions.tolist(), reading.tolist()):
        at = sorted_first[:active] + position
        current = node[:active]
        crossed = boundary[at]
        current = np.where(crossed, flat[current * width + boundary_class], current)
        reached = has_output[current]
        current = flat[current * width + classes[at]]
        reports[:active] |= reached | has_output[current]
        node[:active] = current

    out_node = np.empty(n, dtype=np.int32)
    out_node[order] = node
    out_reports = np.empty(n, dtype=bool)
    out_reports[order] = reports
    crossings = np.zeros(len(boundary) + 1, dtype=np.int64)
    np.cumsum(boundary, out=crossings[1:])
    symbols = (lengths + crossings[first + lengths] - crossings[first]).astype(np.int32)
    # The last character of each token (a sentinel after the texts for the empty ones).
    last = np.where(lengths > 0, first + lengths - 1, len(chars))
    ends_word = np.append(word, False)[last]
    ends_space = np.append(chars, 0)[last] == ord(" ")
    flags = (ends_word.astype(np.uint8) | (ends_space.astype(np.uint8) << 1) | np.uint8(4))
    hit = np.zeros(n, dtype=bool)

    # The rest, one by one: a character that does not normalise to one, or a node that reports a term (and,
    # from another state than the text start, a token that emits no character: its flags are the state's).
    if prev_word or prev_space:
        slow |= lengths == 0
    start = StreamState(0, prev_word, prev_space, ())
    local: list[tuple[int, int]] = []
    for token_id in np.flatnonzero(slow | out_reports).tolist():
        state, count = automaton.feed(start, texts[token_id], local)
        out_node[token_id] = state.node
        symbols[token_id] = count
        flags[token_id] = state.prev_word | (state.prev_space << 1) | ((not local and not state.pending) << 2)
        hit[token_id] = bool(local)
        local.clear()
    return RootRead(out_node, symbols, flags, hit)
