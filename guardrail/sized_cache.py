"""Caches bounded by the bytes their values hold, not by their number of entries.

A cache of compiled objects keyed by what a client sent (a JSON schema, a list set, a request's terms) grows by
what each entry weighs: 256 grammars of a schema padded to 4 MB are 1 GB, 256 grammars of a small one a few MB. So
each cache of the service holds up to a number of bytes (a setting), weighed by :func:`deep_sizeof` (or a cheaper
estimate where the value's layout is known), on cachetools' ``LRUCache`` with ``getsizeof`` (docs/service.md,
"Limits").
"""

from __future__ import annotations

import sys
import threading
import types
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Generic, TypeVar

import numpy as np
from cachetools import LRUCache

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_NOT_WALKED = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)


def deep_sizeof(obj: object, shared: Iterable[object] = ()) -> int:
    """Bytes ``obj`` holds: ``sys.getsizeof`` of it and of everything it reaches (containers, instance
    attributes, slots), each object once, numpy arrays by ``nbytes`` and torch tensors by their storage.

    Args:
        obj: the value to weigh.
        shared: objects not to count nor walk into (what the value shares with the rest of the process: the
            vocab, the tokenizer).

    Returns:
        An estimate in bytes (the allocator's overhead and interned small objects are not counted).
    """
    seen: set[int] = {id(s) for s in shared}
    stack = [obj]
    total = 0
    while stack:
        item = stack.pop()
        if id(item) in seen or isinstance(item, _NOT_WALKED):
            continue
        seen.add(id(item))
        if isinstance(item, np.ndarray):
            total += sys.getsizeof(item) if item.base is None else item.nbytes + 112
            continue
        element_size = getattr(item, "element_size", None)
        nelement = getattr(item, "nelement", None)
        if callable(element_size) and callable(nelement):  # a torch tensor, without importing torch
            total += int(element_size()) * int(nelement()) + 72
            continue
        total += sys.getsizeof(item)
        if isinstance(item, (str, bytes, bytearray, int, float, complex, bool)) or item is None:
            continue
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
        attrs = getattr(item, "__dict__", None)
        if attrs is not None:
            stack.append(attrs)
        for name in getattr(type(item), "__slots__", ()):
            value = getattr(item, name, None)
            if value is not None:
                stack.append(value)
    return total


class SizedLRU(Generic[K, V]):
    """A thread-safe LRU cache holding at most ``max_bytes`` of values (cachetools' ``LRUCache`` with
    ``getsizeof``); the least recently used entries are dropped to make room, and a value larger than the
    whole bound is not kept at all.

    Args:
        max_bytes: the bound, bytes (>= 1).
        sizeof: the weight of a value, bytes (called once, when it is put).

    Raises:
        ValueError: ``max_bytes`` < 1.
    """

    def __init__(self, max_bytes: int, sizeof: Callable[[V], int] = deep_sizeof):
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be >= 1, got {max_bytes!r}")
        self._sizeof = sizeof
        self._pending = 1  # the weight of the value being put (read by cachetools under _lock)
        self._cache: LRUCache[K, V] = LRUCache(max_bytes, getsizeof=self._size_of_entry)  # guarded by _lock
        self._lock = threading.Lock()

    def _size_of_entry(self, value: Any) -> int:
        # cachetools asks for the weight of the value being stored; it was computed before the lock was taken.
        return self._pending

    @property
    def max_bytes(self) -> int:
        return int(self._cache.maxsize)

    @property
    def bytes(self) -> int:
        """Bytes the kept values weigh now (as weighed when they were put)."""
        with self._lock:
            return int(self._cache.currsize)

    def __len__(self) -> int:
        with self._lock:
            return len(self._cache)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._cache

    def get(self, key: K) -> V | None:
        """The value of ``key`` (it becomes the most recently used), or None."""
        with self._lock:
            return self._cache.get(key)

    def put(self, key: K, value: V, size: int | None = None) -> bool:
        """Keep ``value`` under ``key``, weighing ``size`` bytes (None: ``sizeof(value)``), dropping the least
        recently used entries to make room. Returns False, keeping nothing, when it weighs more than the bound."""
        weight = max(1, int(self._sizeof(value) if size is None else size))
        with self._lock:
            if weight > self._cache.maxsize:
                self._cache.pop(key, None)
                return False
            self._pending = weight
            self._cache[key] = value
            return True

    def pop(self, key: K) -> V | None:
        with self._lock:
            return self._cache.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._cache.clear()
