"""The bytes of the kept completion tokens, stop strings, and the release of text that is safe to stream.

Text is released strictly forward: :meth:`TextBuffer.release` turns bytes up to a limit into text with an
incremental UTF-8 decoder (a character split across tokens is released only once whole), and
:meth:`TextBuffer.rollback_to` refuses to cut below what was released, so a rollback can never retract text.

Stop strings are matched on the bytes (UTF-8 is self-synchronising: a match of a valid UTF-8 string always
starts at a character boundary). While the end of the text could be the beginning of a stop string, those
bytes are held back (:meth:`TextBuffer.stop_cuts`), like a banned term that may still complete.
"""

from __future__ import annotations

import codecs
from bisect import bisect_right
from collections.abc import Sequence


class TextBuffer:
    """Completion bytes per token, with a release cursor.

    Args:
        token_bytes: bytes per token id (``TokenVocab.token_bytes``).
        stop: stop strings (non-empty).

    Attributes:
        released: bytes released so far (never decreases).
        text: the text released so far (what the client has).
    """

    def __init__(self, token_bytes: Sequence[bytes], stop: Sequence[str] = ()):
        self._token_bytes = token_bytes
        self._stops = tuple(s.encode("utf-8") for s in stop)
        self._longest_stop = max((len(s) for s in self._stops), default=0)
        self.data = bytearray()
        self._ends = [0]
        self.released = 0
        self.text = ""
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def __len__(self) -> int:
        """Tokens held."""
        return len(self._ends) - 1

    @property
    def ends(self) -> Sequence[int]:
        """``ends[i]``: byte offset after the first ``i`` tokens (``ends[0] == 0``; not to be modified)."""
        return self._ends

    def end(self, tokens: int) -> int:
        """Byte offset after the first ``tokens`` tokens."""
        return self._ends[tokens]

    def token_at(self, offset: int) -> int:
        """Index of the token holding byte ``offset`` (the number of tokens ending at or before it)."""
        return bisect_right(self._ends, offset) - 1

    def append(self, token_id: int) -> None:
        self.data += self._token_bytes[token_id]
        self._ends.append(len(self.data))

    def rollback_to(self, tokens: int) -> None:
        """Keep the first ``tokens`` tokens.

        Raises:
            RuntimeError: the cut would fall inside released text (a decoder invariant broke).
        """
        end = self._ends[tokens]
        if end < self.released:
            raise RuntimeError(f"rollback to byte {end} would retract released text (released {self.released})")
        del self.data[end:]
        del self._ends[tokens + 1:]

    def find_stop(self, since_tokens: int) -> int | None:
        """Byte offset of the earliest stop string ending after the first ``since_tokens`` tokens, or None."""
        if not self._stops:
            return None
        start = max(0, self._ends[since_tokens] - self._longest_stop + 1)
        found = [i for i in (self.data.find(s, start) for s in self._stops) if i >= 0]
        return min(found) if found else None

    def stop_cuts(self) -> list[int]:
        """Byte offsets where a stop string may begin that the text so far does not complete: each is a
        suffix of the text that is a proper prefix of a stop string. Ascending."""
        if not self._stops:  # most requests: nothing to scan
            return []
        cuts = []
        size = len(self.data)
        for length in range(min(self._longest_stop - 1, size), 0, -1):
            tail = bytes(self.data[size - length:])
            if any(s.startswith(tail) for s in self._stops):
                cuts.append(size - length)
        return cuts

    def release(self, limit: int, final: bool = False) -> str:
        """Release bytes up to ``limit`` (clamped to the held bytes); return the new text.

        With ``final`` the stream ends at ``limit``: a dangling partial character becomes U+FFFD (as
        ``bytes.decode(errors="replace")`` does, and as the matcher saw it).
        """
        limit = min(limit, len(self.data))
        if limit < self.released or (limit == self.released and not final):  # held back: no decoder call
            return ""
        chunk = self._decoder.decode(bytes(self.data[self.released:limit]), final)
        self.released = limit
        self.text += chunk
        return chunk
