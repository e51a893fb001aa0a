"""Sets of Unicode code points as sorted ranges, and the alphabet partition a regex automaton steps on.

A :class:`CharSet` is what one position of a regex pattern accepts (``a``, ``[a-z\\d]``, ``\\W``, ``.``),
over the characters of *normalised* text. :class:`Alphabet` splits the code points into classes
("minterms": Hopcroft & Ullman; RE2 calls them byte classes) that no set of the pattern tells apart and
that are all word or all non-word characters, so that a regex automaton can be determinised over a few
dozen classes instead of 1.1 million code points, and a character is mapped to its class by a binary
search (memoised per character by the caller).

The category sets are Python's ``re`` for ``str`` patterns (Modules/_sre/sre.c, ``SRE_UNI_IS_*``):
``\\w`` = ``str.isalnum()`` or ``_`` (the contract's word characters, ``normalize.is_word_char``),
``\\d`` = ``str.isdecimal()``, ``\\s`` = ``str.isspace()``. They are read off ``re`` itself by matching each
over a string of every code point (``scripts/gen_unicode_categories.py``, per Unicode version of Python, shipped
in ``data/unicode_categories.json``; scanned at first use for a version the file lacks).
"""

from __future__ import annotations

import bisect
import functools
import json
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

#: One past the largest code point.
CODE_POINTS = 0x110000


@dataclass(frozen=True)
class CharSet:
    """A set of code points: sorted, disjoint, non-adjacent inclusive ranges ``(low, high)``."""

    ranges: tuple[tuple[int, int], ...]
    _starts: list[int] = field(init=False, repr=False, compare=False, hash=False)
    _hash: int = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_starts", [low for low, _ in self.ranges])
        object.__setattr__(self, "_hash", hash(self.ranges))

    def __hash__(self) -> int:
        # Computed once: a set is a dict key once per NFA edge (an obfuscation NFA has tens of thousands).
        return self._hash

    @classmethod
    def of(cls, points: Iterable[int]) -> CharSet:
        """The set holding ``points`` (code points, any order, duplicates allowed)."""
        return cls.union(*(cls(((p, p),)) for p in points))

    @classmethod
    def union(cls, *sets: CharSet) -> CharSet:
        """The union of ``sets`` (adjacent and overlapping ranges merged)."""
        merged: list[list[int]] = []
        for low, high in sorted(r for s in sets for r in s.ranges):
            if merged and low <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], high)
            else:
                merged.append([low, high])
        return cls(tuple((low, high) for low, high in merged))

    def complement(self) -> CharSet:
        """Every code point not in this set."""
        out, nxt = [], 0
        for low, high in self.ranges:
            if low > nxt:
                out.append((nxt, low - 1))
            nxt = high + 1
        if nxt < CODE_POINTS:
            out.append((nxt, CODE_POINTS - 1))
        return CharSet(tuple(out))

    def __contains__(self, point: int) -> bool:
        at = bisect.bisect_right(self._starts, point) - 1
        return at >= 0 and point <= self.ranges[at][1]

    @property
    def size(self) -> int:
        """Number of code points."""
        return sum(high - low + 1 for low, high in self.ranges)


#: The category sets per Unicode version, as ``re`` reads them (``scripts/gen_unicode_categories.py``).
_TABLES = Path(__file__).parent / "data" / "unicode_categories.json"


def _every_code_point() -> str:
    """A string of every code point in order (surrogates included), 4.4 MB, not kept: decoded from UTF-32 in
    one call (~15 ms; joining 1.1 million ``chr`` calls takes ~0.12 s)."""
    return np.arange(CODE_POINTS, dtype="<u4").tobytes().decode("utf-32-le", "surrogatepass")


def scan_category(category: str) -> CharSet:
    """The code points Python's ``re`` matches with ``category`` (``\\w``, ``\\d`` or ``\\s``, ``str``
    patterns), read off ``re`` itself over every code point (~20 ms each): the definition the shipped tables
    are checked against (tests/matching/test_charset_tables.py)."""
    return CharSet(tuple((m.start(), m.end() - 1) for m in re.finditer(category + "+", _every_code_point())))


@functools.cache
def _shipped() -> dict[str, list[list[int]]]:
    """This Python's entry of the shipped tables (keyed by ``unicodedata.unidata_version``), or ``{}``."""
    versions = json.loads(_TABLES.read_text(encoding="utf-8"))["versions"] if _TABLES.is_file() else {}
    return versions.get(unicodedata.unidata_version, {})


@functools.cache
def _category(category: str) -> CharSet:
    """:func:`scan_category`, from the shipped tables when they hold this Python's Unicode version (a fresh
    process's first artefact load, what ``guardrail compile`` pays once per run, skips the scan)."""
    shipped = _shipped().get(category)
    if shipped is None:
        return scan_category(category)
    return CharSet(tuple((low, high) for low, high in shipped))


def word_chars() -> CharSet:
    """``\\w``: ``str.isalnum()`` or ``_`` (the contract's word characters)."""
    return _category(r"\w")


def digit_chars() -> CharSet:
    """``\\d``: Unicode decimal digits (``str.isdecimal()``, category Nd)."""
    return _category(r"\d")


def space_chars() -> CharSet:
    """``\\s``: ``str.isspace()`` (only ``" "`` occurs in normalised text)."""
    return _category(r"\s")


def _edges(charset: CharSet) -> tuple[np.ndarray, np.ndarray]:
    """``int64`` arrays of the set's range starts and of its range ends + 1."""
    bounds = np.asarray(charset.ranges, dtype=np.int64).reshape(-1, 2)
    return bounds[:, 0], bounds[:, 1] + 1


@functools.cache
def _word_edges() -> tuple[np.ndarray, np.ndarray]:
    """:func:`_edges` of ``\\w``, once (734 ranges, in every alphabet)."""
    return _edges(word_chars())


class Alphabet:
    """The partition of all code points into classes no set in ``sets`` and no word test tells apart.

    Args:
        sets: the character sets of a pattern (or of several).

    Attributes:
        size: number of classes; class ids are ``0..size-1``, numbered by their smallest code point.
        is_word: per class, whether its characters are word characters.
        members: per set of ``sets`` (same order), the sorted class ids it holds.
    """

    def __init__(self, sets: Sequence[CharSet]):
        edges = [_edges(charset) for charset in sets]
        edges.append(_word_edges())
        cuts = np.unique(np.concatenate([np.asarray([0, CODE_POINTS], dtype=np.int64)]
                                        + [part for lows, ends in edges for part in (lows, ends)]))
        self._bounds = cuts
        pieces = len(cuts) - 1
        # inside[s, k]: piece k (code points bounds[k] .. bounds[k+1]-1) lies in set s. Each piece lies wholly
        # inside or outside every set, since every range edge is a cut.
        inside = np.zeros((len(edges), pieces), dtype=bool)
        for row, (lows, ends) in enumerate(edges):
            if not len(lows):
                continue
            delta = np.zeros(pieces + 1, dtype=np.int64)
            np.add.at(delta, np.searchsorted(cuts, lows), 1)
            np.add.at(delta, np.searchsorted(cuts, ends), -1)
            inside[row] = np.cumsum(delta)[:pieces] > 0
        signatures = np.ascontiguousarray(np.packbits(inside, axis=0).T)
        # Classes are the distinct signatures, numbered by their first piece (their smallest code point). Up to
        # 64 sets a signature is one uint64: a 1-D unique is ~20x faster than a row-wise one (void sort).
        if signatures.shape[1] <= 8:
            padded = np.zeros((pieces, 8), dtype=np.uint8)
            padded[:, :signatures.shape[1]] = signatures
            _, first, inverse = np.unique(padded.view(np.uint64).reshape(-1), return_index=True,
                                          return_inverse=True)
        else:
            _, first, inverse = np.unique(signatures, axis=0, return_index=True, return_inverse=True)
        rank = np.empty(len(first), dtype=np.int64)
        rank[np.argsort(first, kind="stable")] = np.arange(len(first))
        piece_class = rank[inverse.reshape(-1)]
        self._piece_class = piece_class.tolist()
        self._starts = self._bounds[:-1].tolist()
        self.size = len(first)
        first_piece = np.sort(first)
        self.is_word = inside[-1, first_piece].tolist()
        self.members = [np.unique(piece_class[inside[row]]).tolist() for row in range(len(sets))]

    def class_of(self, point: int) -> int:
        """The class id of code point ``point``."""
        return self._piece_class[bisect.bisect_right(self._starts, point) - 1]
