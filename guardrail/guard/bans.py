"""Position-keyed token bans: what the decoder must not pick again at a completion position.

A ban at position ``p`` only means something for the prefix it was made under. Rolling back to ``p``
keeps the bans at positions ``<= p`` (their prefixes are unchanged) and drops every ban at ``> p``: their
prefixes no longer exist, and keeping them would wrongly forbid tokens after the prefix changed (the
reference decoder's "stale bans").
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


class PositionBans:
    """``{position: token ids}`` with the sorted ``int64`` id array of each position built once (engines turn it
    into their index tensor; no torch here).

    Example:
        >>> bans = PositionBans()
        >>> bans.add(3, {42, 7})
        >>> bans.rollback_to(2)       # the prefix of position 3 is gone
        >>> bans.at(3) is None
        True
    """

    def __init__(self) -> None:
        self._ids: dict[int, set[int]] = {}
        self._index: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        """Positions holding at least one ban."""
        return len(self._ids)

    def banned(self, position: int) -> frozenset[int]:
        """Token ids banned at ``position``."""
        return frozenset(self._ids.get(position, ()))

    def at(self, position: int) -> np.ndarray | None:
        """``int64 (k,)`` sorted ids banned at ``position``, or ``None``; a new array object after every
        :meth:`add` there (callers may cache what they build from it by identity)."""
        return self._index.get(position)

    def add(self, position: int, token_ids: Iterable[int]) -> None:
        """Ban ``token_ids`` at ``position`` (in addition to earlier bans there).

        Raises:
            ValueError: ``position`` is negative.
        """
        if position < 0:
            raise ValueError(f"position must be >= 0, got {position}")
        ids = self._ids.setdefault(position, set())
        ids.update(int(t) for t in token_ids)
        if ids:
            self._index[position] = np.array(sorted(ids), dtype=np.int64)

    def rollback_to(self, position: int) -> None:
        """Drop every ban at a position ``> position``."""
        for stale in [p for p in self._ids if p > position]:
            del self._ids[stale]
            self._index.pop(stale, None)
