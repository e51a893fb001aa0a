"""The guard of a whole batch: one call per engine step advances every row and gives the batch's masked ids
as one ``(row, column)`` index, which the engine writes in one operation (``logits[rows, cols] = -inf``).

On a GPU host the unit of work is the engine step, not the token: at 256 rows a step leaves about 1 ms of
host time, a few microseconds per row, so nothing here builds an array per row or unions sets per row at
steady state (docs/design.md §7.4, "The guard at batch scale"). What makes it cheap:

* **Masks depend on the automaton state, not the row.** :class:`MaskTable` memoises, per artefact and set of
  end ids, the ids masked in each state (the completing ids, and the end ids where ending the text would
  complete a ``word`` term), shared by every row and request of that artefact. Prose visits few states (77
  in 20,000 tokens of prose with ``en`` on SmolLM2; ``bench/batch_guard.py``), so a row's mask is a lookup.
* **Transitions are memoised per (state, token)** as one ``int -> int`` dict: a row in a state seen before
  advances by one lookup; a new pair asks the artefact once (:meth:`Artefact.transition`).
* **The index is gathered, not built**: the always-banned ids of the rows that share them are laid out once
  per batch membership (``np.repeat``/``np.tile``), and the per-state masks are concatenated from the shared
  arrays with their row ids repeated; when no row's mask changed, the previous index (same
  :attr:`MaskIndex.version`) is returned, so the engine keeps its device tensors.

Rows (:class:`BatchGuard` keys them by batch index, as vLLM's persistent batch does):

* :class:`MaskRow`: a mask-only row (vLLM's logits processor): exactly the masks and after-the-fact hits of a
  :class:`~guardrail.guard.session.MaskSession` fed the same tokens (tested against it), read from the
  engine's live list of generated ids; it keeps a state id, not a matcher: a hit (rare: the masks stop
  them) replays the row's tokens through a :class:`~guardrail.matching.token_matcher.TokenMatcher` once to
  say where the term began.
* :class:`SessionRow`: a row whose :class:`~guardrail.guard.session.GuardSession` the engine drives itself
  (``accept``, rollbacks: the embedded engines); the batch reads :meth:`GuardSession.mask_ids`, the same
  array object until the bans in force change.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from guardrail.guard.session import GuardSession
from guardrail.matching.artefact import COMPLETING_LIMIT, MEMO_LIMIT, ROOT_STATE
from guardrail.matching.combined import ArtefactLike
from guardrail.matching.token_matcher import Hit, TokenMatcher
from guardrail.matching.token_text import token_difference, token_set

__all__ = ["BatchGuard", "MaskIndex", "MaskRow", "MaskTable", "SessionRow", "always_banned_ids"]

_NO_IDS = np.zeros(0, dtype=np.int64)
_NO_IDS.flags.writeable = False
#: :meth:`MaskTable.advance` of a token that completes a term from the state (the row takes the slow path).
HIT = -1
#: :attr:`MaskIndex.version` values, unique in the process (an engine that replaces its batch cannot mistake a
#: new index for the one it built its tensors from).
_VERSIONS = itertools.count(1)
#: vLLM's async scheduling writes this placeholder for an id still on the device (see :meth:`MaskRow.advance`).
PLACEHOLDER = -1


class MaskIndex(NamedTuple):
    """The batch's masked ids: ``logits[rows, cols] = -inf`` masks every row in one write.

    Attributes:
        rows: ``int64 (n,)`` batch indices.
        cols: ``int64 (n,)`` token ids (a pair may repeat: a write of ``-inf`` twice is the same write).
        version: changes whenever the index changes, unique in the process; the same value means the same
            arrays (an engine caches the tensors it built from them by it).
    """

    rows: np.ndarray
    cols: np.ndarray
    version: int


class MaskTable:
    """Per-(state, token) transitions and per-state masks of one artefact for one set of end ids, shared by
    every batch, row and request that uses them (:meth:`of`).

    Args:
        artefact: the compiled lists.
        eos_ids: the ids that end the text (masked in a state where ending the text completes a term).

    Thread safety: lock-free; two threads that miss the same entry both compute it, with the same value
    (the artefact's own memo is thread-safe).

    Attributes:
        computed_transitions, computed_masks: memo misses so far (the benchmark's hit rates).
    """

    _shared: weakref.WeakValueDictionary[tuple[int, frozenset[int]], MaskTable] = weakref.WeakValueDictionary()
    _shared_lock = threading.Lock()

    def __init__(self, artefact: ArtefactLike, eos_ids: Iterable[int]):
        self.artefact = artefact
        self.eos_ids = frozenset(int(t) for t in eos_ids)
        self.width = len(artefact.vocab.token_bytes)
        self._eos = np.array(sorted(self.eos_ids), dtype=np.int64)
        self._next: dict[int, int] = {}
        self._masks: dict[int, np.ndarray] = {}
        self._finishes: dict[int, bool] = {}
        self.computed_transitions = 0
        self.computed_masks = 0

    @classmethod
    def of(cls, artefact: ArtefactLike, eos_ids: Iterable[int]) -> MaskTable:
        """The shared table of ``artefact`` and ``eos_ids`` (kept while a row or an engine holds it)."""
        eos = frozenset(int(t) for t in eos_ids)
        key = (id(artefact), eos)  # the table holds the artefact: its id stays its own while the entry lives
        with cls._shared_lock:
            found = cls._shared.get(key)
            if found is None or found.artefact is not artefact:
                found = cls._shared[key] = cls(artefact, eos)
            return found

    def advance(self, state: int, token: int) -> int:
        """The state after ``token`` from ``state``, or :data:`HIT` when the token completes a term.

        Raises:
            IndexError: ``token`` is outside the vocab.
        """
        found = self._next.get(state * self.width + token)
        return self._transition(state, token) if found is None else found

    def _transition(self, state: int, token: int) -> int:
        self.computed_transitions += 1
        transition = self.artefact.transition(state, token)
        found = HIT if transition.hits else transition.state
        memo = self._next
        if len(memo) >= MEMO_LIMIT:
            memo.clear()
        memo[state * self.width + token] = found
        return found

    def mask(self, state: int) -> np.ndarray:
        """``int64 (k,)`` sorted, not to be modified: the ids masked in ``state`` besides the artefact's always-banned
        ids: the completing ids, plus the end ids when ending the text here would complete a ``word`` term.
        The same array object for the same state (an empty state shares one empty array)."""
        found = self._masks.get(state)
        if found is None:
            found = self._mask(state)
        return found

    def _mask(self, state: int) -> np.ndarray:
        self.computed_masks += 1
        artefact = self.artefact
        parts = [artefact.completing_tokens(state)]
        if self.ends_on_term(state):
            parts.append(self._eos)
        ids = token_difference(token_set(*parts), artefact.always_banned)
        if not len(ids):
            ids = _NO_IDS  # one empty array for every empty state: a row moving between them changes nothing
        if len(self._masks) >= COMPLETING_LIMIT:
            self._masks.clear()
        self._masks[state] = ids
        return ids

    def ends_on_term(self, state: int) -> bool:
        """Whether ending the text in ``state`` completes a term (a ``word`` term's pending boundary)."""
        found = self._finishes.get(state)
        if found is None:
            found = self._finishes[state] = bool(self.artefact.finish(state).hits)
        return found


def always_banned_ids(artefact: ArtefactLike | None, vocab_size: int, num_logits: int | None = None,
                      extra: Iterable[int] = ()) -> np.ndarray:
    """``int64 (k,)`` sorted: the ids masked at every position of a row: the artefact's always-banned ids,
    the padded logits ids ``[vocab_size, num_logits)`` (no text), and ``extra`` (a request's own)."""
    parts = [artefact.always_banned] if artefact is not None else []
    if num_logits is not None and num_logits > vocab_size:
        parts.append(np.arange(vocab_size, num_logits, dtype=np.int64))
    extra_ids = np.fromiter((int(t) for t in extra), dtype=np.int64)
    if len(extra_ids):
        parts.append(extra_ids)
    return token_set(*parts) if parts else _NO_IDS


class MaskRow:
    """One mask-only row: the masks and after-the-fact hits of a :class:`MaskSession` fed the same tokens.

    Args:
        table: the artefact's :class:`MaskTable` (``None``: no terms guarded, only ``always_banned`` and ``bans``).
        tokens: the row's generated ids, a list the engine appends to (vLLM's live ``output_token_ids``); each
            :meth:`advance` reads the ids appended since the last one. Trailing :data:`PLACEHOLDER` ids
            (vLLM's async scheduling, ids still on the device) are read at a later step.
        always_banned: ``int64 (k,)`` sorted ids masked at every position (:func:`always_banned_ids`); rows
            that share the array object share its layout in the index.
        bans: ``{position: int64 (k,) ids}`` masked at that position only (positions count ``tokens``).
        prefix: ids the matcher reads before ``tokens`` (the completion text before a resubmission), not
            counted as positions.

    Attributes:
        missed: the hits that completed after the fact (:meth:`MaskSession.advance`), in order; after one the
            matcher restarts after the token, as at a text start.
        state: the matcher's automaton state id.
        position: ids of ``tokens`` read so far.
    """

    __slots__ = ("table", "tokens", "always_banned", "bans", "prefix", "missed", "state", "position", "state_ids",
                 "position_ids", "_restart")

    def __init__(self, table: MaskTable | None, tokens: list[int], always_banned: np.ndarray = _NO_IDS, *,
                 bans: Mapping[int, np.ndarray] | None = None, prefix: Sequence[int] = ()):
        self.table = table
        self.tokens = tokens
        self.always_banned = always_banned
        self.bans = dict(bans) if bans else None
        self.prefix = [int(t) for t in prefix]
        self.missed: list[Hit] = []
        self.state = ROOT_STATE
        self.position = 0
        self._restart = 0  # where the matcher last restarted (after a hit): an index of prefix + tokens
        if table is not None:
            for index, token in enumerate(self.prefix):
                self._read(table, token, index)
        self.state_ids = table.mask(self.state) if table is not None else _NO_IDS
        self.position_ids = self.bans.get(0) if self.bans else None

    def advance(self) -> bool:
        """Read the ids appended to :attr:`tokens` since the last call; whether the row's mask changed."""
        tokens = self.tokens
        end = len(tokens)
        position = self.position
        if end == position:
            return False
        while tokens[end - 1] == PLACEHOLDER:
            end -= 1
            if end == position:
                return False
        table = self.table
        if table is not None:
            if end == position + 1:  # the common step: one new id, a memo hit, no term completed
                token = tokens[position]
                found = table._next.get(self.state * table.width + token)
                if found is None or found == HIT or token in table.eos_ids:
                    self._read(table, token, len(self.prefix) + position)
                else:
                    self.state = found
            else:
                offset = len(self.prefix)
                for index in range(position, end):
                    self._read(table, tokens[index], offset + index)
        self.position = end
        changed = False
        if table is not None:
            ids = table.mask(self.state)
            if ids is not self.state_ids:
                self.state_ids, changed = ids, True
        if self.bans is not None:
            extra = self.bans.get(end)
            if extra is not self.position_ids:
                self.position_ids, changed = extra, True
        return changed

    def _read(self, table: MaskTable, token: int, index: int) -> None:
        """One id through the matcher, as :meth:`MaskSession.advance`; ``index``: its place in ``prefix +
        tokens``."""
        if token in table.eos_ids:  # the text ends here: the end-of-text check; the state stays
            if table.ends_on_term(self.state):
                hit = self._replay(table, index).finish()
                assert hit is not None, "the memo says ending here completes a term"
                self.missed.append(hit)
            return
        found = table.advance(self.state, token)
        if found != HIT:
            self.state = found
            return
        hit = self._replay(table, index).push(token)
        assert hit is not None, "the memo says this token completes a term"
        self.missed.append(hit)
        self.state = ROOT_STATE
        self._restart = index + 1

    def _replay(self, table: MaskTable, end: int) -> TokenMatcher:
        """A matcher fed what this row's matcher read since its last restart, up to ``prefix + tokens`` index
        ``end`` (exclusive): a hit's start needs the matcher's whole history, which the row does not keep."""
        matcher = TokenMatcher(table.artefact)
        prefix = self.prefix
        head = len(prefix)
        start = self._restart
        ids = prefix[start:min(end, head)] + self.tokens[max(start - head, 0):max(end - head, 0)]
        eos = table.eos_ids
        for token in ids:
            if token not in eos:
                matcher.push(token)
        return matcher

    @property
    def token_ids(self) -> tuple[int, ...]:
        """The generated ids read so far, end ids included (vLLM keeps them in its list)."""
        return tuple(self.tokens[:self.position])

    def mask_ids(self) -> np.ndarray:
        """``int64 (k,)`` sorted: this row's masked ids at its current position (a new array; for tests and
        checks, the batch never builds it)."""
        parts = [self.always_banned, self.state_ids]
        if self.position_ids is not None:
            parts.append(self.position_ids)
        return token_set(*parts)


class SessionRow:
    """A row whose :class:`GuardSession` the engine drives itself (``accept``, rollbacks): the batch reads its
    :meth:`GuardSession.mask_ids` at every step (the same array until the bans in force change).

    Args:
        session: the row's guard session.
    """

    __slots__ = ("session", "state_ids")
    always_banned = _NO_IDS  # the session's always-banned ids are inside its mask_ids()
    position_ids = None

    def __init__(self, session: GuardSession):
        self.session = session
        self.state_ids = session.mask_ids()

    def advance(self) -> bool:
        """Read the session's mask at its current position; whether it changed."""
        ids = self.session.mask_ids()
        if ids is self.state_ids:
            return False
        self.state_ids = ids
        return True


class BatchGuard:
    """The guard of one engine's batch: rows keyed by batch index, one :meth:`step` per engine step.

    Rows join with :meth:`add`, leave with :meth:`remove` and change index with :meth:`move` (vLLM's
    ``BatchUpdate``: removes, then adds, then moves). A batch index without a row is not masked.

    Example:
        >>> batch = BatchGuard()
        >>> batch.add(0, MaskRow(MaskTable.of(artefact, eos_ids), output_ids))
        >>> rows, cols, version = batch.step()      # after the engine appended the step's ids
        >>> logits[torch.from_numpy(rows), torch.from_numpy(cols)] = -inf
    """

    def __init__(self) -> None:
        self._rows: dict[int, MaskRow | SessionRow] = {}
        self._index = MaskIndex(_NO_IDS, _NO_IDS, next(_VERSIONS))
        self._members_changed = False  # rows joined, left or moved since the last step
        self._always: tuple[np.ndarray, np.ndarray] = (_NO_IDS, _NO_IDS)  # the always-banned part, by membership

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, index: int) -> bool:
        return index in self._rows

    def __getitem__(self, index: int) -> MaskRow | SessionRow:
        return self._rows[index]

    def __iter__(self) -> Iterator[int]:
        return iter(self._rows)

    def add(self, index: int, row: MaskRow | SessionRow) -> None:
        """Put ``row`` at batch index ``index`` (replacing the row there)."""
        self._rows[index] = row
        self._members_changed = True

    def remove(self, index: int) -> MaskRow | SessionRow | None:
        """Take the row at ``index`` out (nothing there: ``None``)."""
        row = self._rows.pop(index, None)
        if row is not None:
            self._members_changed = True
        return row

    def move(self, source: int, target: int, swap: bool = False) -> None:
        """The row at ``source`` goes to ``target`` (replacing the row there, or, with ``swap``, trading places)."""
        rows = self._rows
        moved, other = rows.pop(source, None), rows.pop(target, None)
        if moved is not None:
            rows[target] = moved
        if other is not None and swap:
            rows[source] = other
        if moved is not None or other is not None:
            self._members_changed = True

    def step(self) -> MaskIndex:
        """Advance every row by its new ids and return the batch's masked ids at its next position.

        Returns:
            The :class:`MaskIndex`; the previous one itself (same version) when no row's mask changed and no
            row joined, left or moved.

        Raises:
            IndexError: a row read an id outside the vocab.
        """
        changed = self._members_changed
        for row in self._rows.values():
            if row.advance():
                changed = True
        if not changed:
            return self._index
        if self._members_changed:
            self._always = self._lay_always()
            self._members_changed = False
        indices: list[int] = []
        arrays: list[np.ndarray] = []
        for index, row in self._rows.items():
            ids = row.state_ids
            if len(ids):
                indices.append(index)
                arrays.append(ids)
            extra = row.position_ids
            if extra is not None:
                indices.append(index)
                arrays.append(extra)
        always_rows, always_cols = self._always
        if arrays:
            lengths = np.fromiter((len(a) for a in arrays), dtype=np.int64, count=len(arrays))
            rows = np.repeat(np.array(indices, dtype=np.int64), lengths)
            cols = np.concatenate(arrays)
            if len(always_rows):
                rows, cols = np.concatenate((always_rows, rows)), np.concatenate((always_cols, cols))
        else:
            rows, cols = always_rows, always_cols
        self._index = MaskIndex(rows, cols, next(_VERSIONS))
        return self._index

    def _lay_always(self) -> tuple[np.ndarray, np.ndarray]:
        """The always-banned part of the index: each shared array laid out once for the rows that hold it."""
        groups: dict[int, tuple[np.ndarray, list[int]]] = {}
        for index, row in self._rows.items():
            always = row.always_banned
            if len(always):
                groups.setdefault(id(always), (always, []))[1].append(index)
        if not groups:
            return _NO_IDS, _NO_IDS
        rows = [np.repeat(np.array(indices, dtype=np.int64), len(always)) for always, indices in groups.values()]
        cols = [np.tile(always, len(indices)) for always, indices in groups.values()]
        return np.concatenate(rows), np.concatenate(cols)
