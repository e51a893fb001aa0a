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

import numpy as np

from guardrail.matching.normalize import fold_char, is_word_char

#: Separator of the joined blob: NUL is dropped by normalisation, so no token text contains it.
_SPACE_RUN = re.compile(" {2,}")


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
        candidates = np.unique(owners[best[0]:best[1]])
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

    def nonword_first(self, case_sensitive: bool) -> np.ndarray:
        """``int64[k]`` sorted ids of tokens whose first normalised character is not a word character."""
        return self._modes[case_sensitive].nonword_first
