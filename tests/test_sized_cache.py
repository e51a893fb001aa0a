"""Caches bounded by bytes (guardrail/sized_cache.py): eviction by weight, least recently used first, a value
heavier than the bound never kept, and the weights deep_sizeof gives."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from guardrail.sized_cache import SizedLRU, deep_sizeof


def test_entries_are_dropped_by_bytes_least_recently_used_first():
    cache: SizedLRU[str, bytes] = SizedLRU(100, sizeof=len)
    cache.put("a", b"x" * 40)
    cache.put("b", b"x" * 40)
    assert cache.bytes == 80 and len(cache) == 2
    assert cache.get("a") is not None  # "a" is now the most recently used
    cache.put("c", b"x" * 40)  # 120 > 100: the least recently used ("b") goes
    assert ("a" in cache, "b" in cache, "c" in cache) == (True, False, True)
    assert cache.bytes == 80
    cache.put("d", b"x" * 90)  # needs both others out
    assert [k for k in "abcd" if k in cache] == ["d"] and cache.bytes == 90


def test_many_small_entries_fit_where_one_big_one_does_not():
    cache: SizedLRU[int, bytes] = SizedLRU(1000, sizeof=len)
    for i in range(100):
        assert cache.put(i, b"x" * 10)
    assert len(cache) == 100 and cache.bytes == 1000
    assert cache.put(-1, b"x" * 1001) is False  # heavier than the whole bound: not kept, nothing dropped
    assert -1 not in cache and len(cache) == 100


def test_an_explicit_size_wins_and_a_replaced_entry_is_reweighed():
    cache: SizedLRU[str, object] = SizedLRU(100, sizeof=lambda value: 1)
    cache.put("a", object(), size=70)
    cache.put("a", object(), size=20)
    assert cache.bytes == 20
    with pytest.raises(ValueError, match="max_bytes"):
        SizedLRU(0)


def test_deep_sizeof_counts_arrays_strings_and_attributes_once_and_skips_shared_objects():
    class Holder:
        def __init__(self, array, text, shared):
            self.array, self.again, self.text, self.shared = array, array, text, shared

    array = np.zeros(1_000_000, dtype=np.float32)  # 4 MB
    shared = np.zeros(2_000_000, dtype=np.uint8)
    holder = Holder(array, "y" * 500_000, shared)
    weight = deep_sizeof(holder, shared=(shared,))
    assert array.nbytes + 500_000 <= weight < array.nbytes + 500_000 + 10_000  # the array once, not twice
    assert deep_sizeof(holder) >= weight + shared.nbytes
    assert deep_sizeof({"k": ["a" * 1000]}) >= sys.getsizeof("a" * 1000)
