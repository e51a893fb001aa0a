"""Position-keyed token bans: what the decoder must not pick again at a completion position.

A ban at position ``p`` only means something for the prefix it was made under. Rolling back to ``p``
keeps the bans at positions ``<= p`` (their prefixes are unchanged) and drops every ban at ``> p``: their
prefixes no longer exist, and keeping them would wrongly forbid tokens after the prefix changed (the
reference decoder's "stale bans").
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


class PositionBans:
    """``{position: token ids}`` with the mask index tensor of each position built once.

    Example:
        >>> bans = PositionBans()
        >>> bans.add(3, {42, 7})
        >>> bans.rollback_to(2)       # the prefix of position 3 is gone
        >>> bans.at(3) is None
        True
    """

    def __init__(self) -> None:
        self._ids: dict[int, set[int]] = {}
        self._index: dict[int, torch.Tensor] = {}

    def __len__(self) -> int:
        """Positions holding at least one ban."""
        return len(self._ids)

    def banned(self, position: int) -> frozenset[int]:
        """Token ids banned at ``position``."""
        return frozenset(self._ids.get(position, ()))

    def at(self, position: int) -> torch.Tensor | None:
        """``int64 (k,)`` index of the ids banned at ``position`` (for ``index_fill_``), or ``None``."""
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
            self._index[position] = torch.tensor(sorted(ids), dtype=torch.long)

    def rollback_to(self, position: int) -> None:
        """Drop every ban at a position ``> position``."""
        for stale in [p for p in self._ids if p > position]:
            del self._ids[stale]
            self._index.pop(stale, None)
