"""Per-vocab index of every token's normalised text: find tokens by prefix or substring without a sweep.

A :class:`TokenTextIndex` holds, per case mode, each token's text as the automaton reads it from a
context with no pending UTF-8 bytes and no preceding space (:mod:`guardrail.matching.normalize` applied per
character, whitespace runs collapsed inside the token, an unfinished trailing UTF-8 character left out).
It is built once per vocab (:meth:`TokenTextIndex.for_vocab`, ~1 s for Gemma 3's 262,144 tokens on one
core) and answers, in well under a millisecond to a few milliseconds:

* :meth:`starting_with`: tokens whose text begins with a string (binary search over the sorted texts);
* :meth:`containing`: tokens whose text contains a string (``str.find`` over one joined blob);
* :attr:`nonword_first`: tokens whose first normalised character is a non-word character;
* :attr:`continuation_first`: tokens whose bytes begin with a UTF-8 continuation byte.

These are supersets (or, for ``nonword_first``, exact classes) that the artefact narrows with exact
transitions: the index never decides a match by itself.
"""

from __future__ import annotations

import bisect
import codecs
import re
import threading

import numpy as np

from guardrail.matching.normalize import fold_char, is_word_char

#: Separator of the joined blob: NUL is dropped by normalisation, so no token text contains it.
_SEPARATOR = "\x00"
_ASCII_SPACE = re.compile(r"[\t\n\x0b\x0c\r\x1c-\x1f ]+")
_MAX_CHAR = "\U0010ffff"


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
    if text.isascii():
        if not case_sensitive:
            text = text.lower()
        return _ASCII_SPACE.sub(" ", text.replace("\x00", ""))
    out: list[str] = []
    prev_space = False
    for char in text:
        for c in fold_char(char, case_sensitive):
            if c == " ":
                if prev_space:
                    continue
                prev_space = True
            else:
                prev_space = False
            out.append(c)
    return "".join(out)


class _CaseIndex:
    """The index of one case mode (see :class:`TokenTextIndex`)."""

    def __init__(self, texts: list[str]):
        order = sorted(range(len(texts)), key=texts.__getitem__)
        self.sorted_texts = [texts[i] for i in order]
        self.sorted_ids = np.asarray(order, dtype=np.int64)
        self.blob = _SEPARATOR.join(texts)
        starts = np.zeros(len(texts), dtype=np.int64)
        np.cumsum([len(t) + 1 for t in texts[:-1]], out=starts[1:])
        self.starts = starts
        self.nonword_first = np.asarray([i for i, t in enumerate(texts) if t and not is_word_char(t[0])],
                                        dtype=np.int64)

    def starting_with(self, prefix: str) -> np.ndarray:
        lo = bisect.bisect_left(self.sorted_texts, prefix)
        hi = bisect.bisect_left(self.sorted_texts, prefix + _MAX_CHAR, lo)
        return self.sorted_ids[lo:hi]

    def containing(self, needle: str) -> np.ndarray:
        find, positions = self.blob.find, []
        at = find(needle)
        while at >= 0:
            positions.append(at)
            at = find(needle, at + 1)
        if not positions:
            return np.empty(0, dtype=np.int64)
        return np.unique(np.searchsorted(self.starts, np.asarray(positions), side="right") - 1).astype(np.int64)


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
        self._modes = {cs: _CaseIndex([normalize_token(t, cs) for t in texts]) for cs in (False, True)}
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
        """``int64[k]`` ids (unsorted) of tokens whose normalised text starts with ``prefix``."""
        return self._modes[case_sensitive].starting_with(prefix)

    def containing(self, needle: str, case_sensitive: bool) -> np.ndarray:
        """``int64[k]`` sorted ids of tokens whose normalised text contains ``needle`` (non-empty)."""
        if not needle:
            raise ValueError("needle must not be empty")
        return self._modes[case_sensitive].containing(needle)

    def nonword_first(self, case_sensitive: bool) -> np.ndarray:
        """``int64[k]`` sorted ids of tokens whose first normalised character is not a word character."""
        return self._modes[case_sensitive].nonword_first
