"""Per-vocab index of every token's normalised text: find tokens by prefix or substring without a sweep.

A :class:`TokenTextIndex` holds, per case mode, each token's text as the automaton reads it from a
context with no pending UTF-8 bytes and no preceding space (:mod:`guardrail.matching.normalize` applied per
character, whitespace runs collapsed inside the token, an unfinished trailing UTF-8 character left out).
It is built once per vocab (:meth:`TokenTextIndex.for_vocab`, ~1 s for Gemma 3's 262,144 tokens on one
core) and answers, in well under a millisecond to a few milliseconds:

* :meth:`starting_with`: tokens whose text begins with a string;
* :meth:`containing`: tokens whose text contains a string (an index of 1-3 character windows);
* :attr:`nonword_first`: tokens whose first normalised character is a non-word character;
* :attr:`continuation_first`: tokens whose bytes begin with a UTF-8 continuation byte.

These are supersets (or, for ``nonword_first``, exact classes) that the artefact narrows with exact
transitions: the index never decides a match by itself.
"""

from __future__ import annotations

import codecs
import re
import threading
from collections.abc import Sequence

import numpy as np

from guardrail.matching.normalize import fold_char, is_word_char

#: Separator of the joined blob: NUL is dropped by normalisation, so no token text contains it.
_SPACE_RUN = re.compile(" {2,}")


def token_set(*arrays: np.ndarray) -> np.ndarray:
    """``int64[k]``: the sorted union of token-id arrays.

    Sort-based on purpose: numpy 2's hash-based ``np.unique`` (also behind ``union1d``) takes ~0.25 s on a
    150k-id Gemma 3 mask, sorting takes ~5 ms.
    """
    distinct = {id(a): a for a in arrays if len(a)}  # the same class is often passed more than once
    if not distinct:
        return np.empty(0, dtype=np.int64)
    if len(distinct) == 1:
        (only,) = distinct.values()
        if np.all(only[1:] > only[:-1]):
            return only.astype(np.int64, copy=False)
    arrays = tuple(distinct.values())
    joined = np.sort(np.concatenate(arrays).astype(np.int64, copy=False))
    if len(joined) < 2:
        return joined
    keep = np.empty(len(joined), dtype=bool)
    keep[0] = True
    np.not_equal(joined[1:], joined[:-1], out=keep[1:])
    return joined[keep]


def token_intersection(ids: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """The ids of sorted ``ids`` that are also in sorted ``keep`` (binary search; see :func:`token_set`)."""
    if not len(keep) or not len(ids):
        return ids[:0]
    at = np.minimum(np.searchsorted(keep, ids), len(keep) - 1)
    return ids[keep[at] == ids]


def token_difference(ids: np.ndarray, remove: np.ndarray) -> np.ndarray:
    """The ids of sorted ``ids`` that are not in sorted ``remove`` (binary search; see :func:`token_set`)."""
    if not len(remove) or not len(ids):
        return ids
    at = np.minimum(np.searchsorted(remove, ids), len(remove) - 1)
    return ids[remove[at] != ids]


def token_text(data: bytes) -> str:
    """The decoded text of a token read from a clean context: invalid bytes as U+FFFD, an unfinished
    trailing UTF-8 character left out (the artefact's incremental decoder keeps it pending)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return codecs.getincrementaldecoder("utf-8")("replace").decode(data, False)


def normalize_token(text: str, case_sensitive: bool) -> str:
    """Normalise a token's text as :meth:`guardrail.matching.automaton.Automaton.feed` reads it from a
    context without a preceding space (a leading space is kept; internal runs collapse to one)."""
    return normalize_tokens([text], case_sensitive)[0]


def normalize_tokens(texts: list[str], case_sensitive: bool) -> list[str]:
    """:func:`normalize_token` of many texts at once: one ``str.translate`` over the joined texts with a
    table of :func:`~guardrail.matching.normalize.fold_char` per distinct character, then whitespace runs
    collapsed (``fold_char`` maps every whitespace character to one space)."""
    joined = "".join(texts)
    separator = next(c for c in ("\uffff", "\U0010fffe", "\U0010ffff", "\ufffe") if c not in joined)
    table = {ord(c): fold_char(c, case_sensitive) for c in set(joined)}
    folded = separator.join(texts).translate(table)
    return _SPACE_RUN.sub(" ", folded).split(separator)


class _CaseIndex:
    """The index of one case mode (see :class:`TokenTextIndex`).

    Every window of 1, 2 and 3 characters of every text, packed into one ``int64`` (21 bits per code
    point), sits in a sorted array with its token id alongside (and, for prefix search, the windows at
    the start of each text). A needle's candidates are the tokens holding its rarest window, each then
    checked with ``in`` (``startswith``). All built with numpy over the texts' UTF-32 code points.
    """

    def __init__(self, texts: list[str]):
        self.texts = texts
        self._sorted: tuple[list[str], np.ndarray] | None = None
        lengths = np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))
        points = np.frombuffer("".join(texts).encode("utf-32-le"), dtype=np.uint32).astype(np.int64)
        owner = np.repeat(np.arange(len(texts), dtype=np.int64), lengths)
        first = np.cumsum(lengths) - lengths
        offset = np.arange(len(points), dtype=np.int64) - np.repeat(first, lengths)
        room = np.repeat(lengths, lengths) - offset  # characters left in the text from each position
        starts_nonword = np.array([not is_word_char(chr(c)) for c in points[first[lengths > 0]].tolist()])
        self.nonword_first = np.flatnonzero(lengths > 0)[starts_nonword].astype(np.int64)
        # windows[w - 1]: (sorted keys, owners) of every w-character window; heads: only windows at offset 0.
        self.windows: list[tuple[np.ndarray, np.ndarray]] = []
        self.heads: list[tuple[np.ndarray, np.ndarray]] = []
        for width in (1, 2, 3):
            usable = np.flatnonzero(room >= width)
            keys = np.zeros(len(usable), dtype=np.int64)
            for k in range(width):
                keys = (keys << 21) | points[usable + k]
            owners = owner[usable]
            by_key = np.argsort(keys)
            self.windows.append((keys[by_key], owners[by_key]))
            at_head = offset[usable] == 0
            by_key = np.argsort(keys[at_head])
            self.heads.append((keys[at_head][by_key], owners[at_head][by_key]))

    @staticmethod
    def _key(chars: str) -> int:
        key = 0
        for c in chars:
            key = (key << 21) | ord(c)
        return key

    def starting_with(self, prefix: str) -> np.ndarray:
        width = min(len(prefix), 3)
        keys, owners = self.heads[width - 1]
        key = self._key(prefix[:width])
        found = owners[np.searchsorted(keys, key):np.searchsorted(keys, key, side="right")]
        if len(prefix) == width:
            return found
        texts = self.texts
        return np.asarray([t for t in found.tolist() if texts[t].startswith(prefix)], dtype=np.int64)

    def count_containing(self, needle: str) -> int:
        """An upper bound of ``len(containing(needle))``: the tokens holding its rarest window."""
        width = min(len(needle), 3)
        keys = self.windows[width - 1][0]
        return min(int(np.searchsorted(keys, key, side="right") - np.searchsorted(keys, key))
                   for key in (self._key(needle[i:i + width]) for i in range(len(needle) - width + 1)))

    def _any_slices(self, ranges: Sequence[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
        keys = self.windows[0][0]  # 1-character windows: the key is the code point
        lows = np.asarray([low for low, _ in ranges], dtype=np.int64)
        highs = np.asarray([high for _, high in ranges], dtype=np.int64)
        return np.searchsorted(keys, lows), np.searchsorted(keys, highs, side="right")

    def count_containing_any(self, ranges: Sequence[tuple[int, int]]) -> int:
        """An upper bound of ``len(containing_any(ranges))`` (windows, not distinct tokens)."""
        if not ranges:
            return 0
        starts, stops = self._any_slices(ranges)
        return int((stops - starts).sum())

    def containing_any(self, ranges: Sequence[tuple[int, int]]) -> np.ndarray:
        """Tokens whose text holds a character in one of the inclusive code-point ``ranges`` (sorted)."""
        if not ranges:
            return np.empty(0, dtype=np.int64)
        owners = self.windows[0][1]
        starts, stops = self._any_slices(ranges)
        return token_set(*(owners[a:b] for a, b in zip(starts.tolist(), stops.tolist()) if b > a))

    def sorted_texts(self) -> tuple[list[str], np.ndarray]:
        """The texts in sorted order and, alongside, ``int64`` token ids (built on first use, ~0.2 s for
        Gemma 3: regex streams walk them as a trie, :mod:`guardrail.matching.regex.tokens`)."""
        found = self._sorted
        if found is None:
            order = sorted(range(len(self.texts)), key=self.texts.__getitem__)
            found = self._sorted = ([self.texts[i] for i in order], np.asarray(order, dtype=np.int64))
        return found

    def containing(self, needle: str) -> np.ndarray:
        width = min(len(needle), 3)
        keys, owners = self.windows[width - 1]
        best = (0, len(keys) + 1)
        for i in range(len(needle) - width + 1):
            key = self._key(needle[i:i + width])
            lo = int(np.searchsorted(keys, key))
            hi = int(np.searchsorted(keys, key, side="right"))
            if hi - lo < best[1] - best[0]:
                best = (lo, hi)
        candidates = token_set(owners[best[0]:best[1]])
        if len(needle) == width:
            return candidates
        texts = self.texts
        return np.asarray([t for t in candidates.tolist() if needle in texts[t]], dtype=np.int64)


class TokenTextIndex:
    """Normalised token texts of one vocab, both case modes (build with :meth:`for_vocab`).

    Args:
        token_bytes: the vocab's bytes table (``TokenVocab.token_bytes``).

    Attributes:
        continuation_first: ``int64[k]`` sorted ids of tokens whose first byte is a UTF-8 continuation byte
            (they can complete a character left unfinished by earlier tokens).
        build_seconds: wall time the build took (reported by ``bench/request_terms.py``).
    """

    _cache: dict[str, TokenTextIndex] = {}
    _cache_lock = threading.Lock()

    def __init__(self, token_bytes: tuple[bytes, ...]):
        import time

        started = time.perf_counter()
        texts = [token_text(b) for b in token_bytes]
        self.size = len(texts)
        self._modes = {cs: _CaseIndex(normalize_tokens(texts, cs)) for cs in (False, True)}
        self.continuation_first = np.asarray([i for i, b in enumerate(token_bytes) if b and b[0] & 0xC0 == 0x80],
                                             dtype=np.int64)
        self.build_seconds = time.perf_counter() - started

    @classmethod
    def for_vocab(cls, vocab) -> TokenTextIndex:
        """The index of ``vocab`` (a :class:`~guardrail.matching.vocab.TokenVocab`), built on first use and
        kept for the process (one per vocab fingerprint; thread-safe, built once)."""
        found = cls._cache.get(vocab.fingerprint)
        if found is None:
            with cls._cache_lock:
                found = cls._cache.get(vocab.fingerprint)
                if found is None:
                    found = cls._cache[vocab.fingerprint] = cls(vocab.token_bytes)
        return found

    def starting_with(self, prefix: str, case_sensitive: bool) -> np.ndarray:
        """``int64[k]`` ids (unsorted) of tokens whose normalised text starts with ``prefix`` (non-empty)."""
        return self._modes[case_sensitive].starting_with(prefix)

    def containing(self, needle: str, case_sensitive: bool) -> np.ndarray:
        """``int64[k]`` sorted ids of tokens whose normalised text contains ``needle`` (non-empty)."""
        if not needle:
            raise ValueError("needle must not be empty")
        return self._modes[case_sensitive].containing(needle)

    def count_containing(self, needle: str, case_sensitive: bool) -> int:
        """An upper bound of ``len(containing(needle, case_sensitive))``, without checking candidates."""
        if not needle:
            raise ValueError("needle must not be empty")
        return self._modes[case_sensitive].count_containing(needle)

    def containing_any(self, ranges, case_sensitive: bool) -> np.ndarray:
        """``int64[k]`` sorted ids of tokens whose normalised text holds a character in one of ``ranges``
        (inclusive code-point pairs, e.g. ``CharSet.ranges``)."""
        return self._modes[case_sensitive].containing_any(ranges)

    def count_containing_any(self, ranges, case_sensitive: bool) -> int:
        """An upper bound of ``len(containing_any(ranges, case_sensitive))``."""
        return self._modes[case_sensitive].count_containing_any(ranges)

    def sorted_texts(self, case_sensitive: bool) -> tuple[list[str], np.ndarray]:
        """Every token's normalised text in sorted order, with the ``int64`` ids alongside."""
        return self._modes[case_sensitive].sorted_texts()

    def nonword_first(self, case_sensitive: bool) -> np.ndarray:
        """``int64[k]`` sorted ids of tokens whose first normalised character is not a word character."""
        return self._modes[case_sensitive].nonword_first
