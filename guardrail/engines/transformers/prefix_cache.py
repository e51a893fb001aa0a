"""Prefix caching for the batched engine: the KV cache of prompt heads already prefilled, reused by new rows.

Chat traffic repeats its prompt heads: the chat template's system turn, a deployment's system prompt, the
earlier turns of a conversation. A new row whose prompt begins with a cached head loads that head's keys and
values instead of recomputing them, and its prefill feeds only the rest (less time to first token, and a
smaller group prefill for the rows that join together).

Layout: prompts are cut into blocks of :data:`BLOCK_TOKENS` token ids; a block-aligned prefix is named by a
chained hash (``hash((hash of the previous blocks, this block's ids))``, as vLLM's automatic prefix caching
names its blocks). Each entry holds one prefilled prompt's keys and values up to its last whole block
(``(1, kv_heads, tokens, head_dim)`` per layer, copies: the batch cache is written in place) and is indexed
under every one of its block prefixes, so a prompt that shares only the first blocks of an entry still
reuses them (the tensors are sliced, not copied). A match is verified token by token, so a hash collision
costs a miss, never a wrong cache. Entries are evicted least recently used when their bytes pass the budget.

Numerics: a head computed in an earlier prefill equals the one a fresh prefill would compute up to float
rounding (the same model on the same tokens at the same positions; only the batching of the matmuls
differs), as the batched decode itself does (docs/design.md §7.1).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from cachetools import LRUCache

#: Tokens per block: the granularity of a match. Smaller blocks reuse more of a partly shared head and cost
#: more index keys per entry; 8 keeps a 2,048-token prompt at 256 keys.
BLOCK_TOKENS = 8

#: Default budget of the cache in bytes (the service's ``GUARDRAIL_PREFIX_CACHE_MB``). SmolLM2 float32 holds
#: ~46 KB of keys and values per token, so 256 MiB keep ~5,800 prompt tokens.
DEFAULT_PREFIX_CACHE_BYTES = 256 * 2**20

LayerKV = tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class CachedPrefix:
    """A prompt head found in the cache.

    Attributes:
        length: tokens of the head (a multiple of :data:`BLOCK_TOKENS`, shorter than the prompt).
        layers: per layer ``(keys, values)``, each ``(1, kv_heads, length, head_dim)`` in the model's dtype;
            views of the cached tensors: never write to them.
    """

    length: int
    layers: list[LayerKV]


@dataclass
class _Entry:
    tokens: tuple[int, ...]
    layers: list[LayerKV]
    hashes: list[int]
    nbytes: int


def block_hashes(token_ids: Sequence[int]) -> list[int]:
    """The chained hash of every whole-block prefix of ``token_ids`` (``[h(8 tokens), h(16 tokens), ...]``)."""
    hashes, running = [], hash(("guardrail-prefix", BLOCK_TOKENS))
    for start in range(0, len(token_ids) - BLOCK_TOKENS + 1, BLOCK_TOKENS):
        running = hash((running, tuple(token_ids[start:start + BLOCK_TOKENS])))
        hashes.append(running)
    return hashes


class _Entries(LRUCache[int, _Entry]):
    """Entries by ``id``, sized by their bytes; the least recently used go first and are unindexed
    (``on_evict``). Reading an entry (``entries[key]``) makes it the most recently used."""

    def __init__(self, max_bytes: int, on_evict: Callable[[_Entry], None]):
        super().__init__(max_bytes, getsizeof=lambda entry: entry.nbytes)
        self._on_evict = on_evict

    def popitem(self) -> tuple[int, _Entry]:
        key, entry = super().popitem()
        self._on_evict(entry)
        return key, entry


class PrefixCache:
    """Prompt heads' KV caches, least recently used out (see the module docstring).

    Args:
        max_bytes: budget of the cached tensors in bytes (0 disables caching: every lookup misses).

    Attributes:
        queries, hits: lookups, and lookups that found a head.
        cached_tokens: prompt tokens served from the cache so far (the sum of the hits' lengths).

    Raises:
        ValueError: ``max_bytes`` below 0.
    """

    def __init__(self, max_bytes: int = DEFAULT_PREFIX_CACHE_BYTES):
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.max_bytes = max_bytes
        self.queries = self.hits = self.cached_tokens = 0
        self._entries = _Entries(max_bytes, self._unindex)
        # block-prefix hash -> an entry holding that prefix (the latest inserted; an evicted entry's prefixes
        # are found again once a prompt holding them is inserted again)
        self._index: dict[int, _Entry] = {}

    def __len__(self) -> int:
        """Entries held."""
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        """Bytes of the cached tensors."""
        return int(self._entries.currsize)

    def match(self, token_ids: Sequence[int]) -> CachedPrefix | None:
        """The longest cached head of ``token_ids`` that leaves at least one token to prefill, or ``None``."""
        self.queries += 1
        hashes = block_hashes(token_ids[:len(token_ids) - 1])  # the last token must be fed: its logits are needed
        for blocks in range(len(hashes), 0, -1):
            entry = self._index.get(hashes[blocks - 1])
            length = blocks * BLOCK_TOKENS
            if entry is None or entry.tokens[:length] != tuple(token_ids[:length]):
                continue
            self._entries[id(entry)]  # noqa: B018 - a read makes it the most recently used
            self.hits += 1
            self.cached_tokens += length
            return CachedPrefix(length, [(k[:, :, :length], v[:, :, :length]) for k, v in entry.layers])
        return None

    def insert(self, token_ids: Sequence[int], layers: Sequence[LayerKV]) -> None:
        """Cache the whole blocks of a prefilled prompt.

        Args:
            token_ids: the prompt.
            layers: per layer ``(keys, values)`` ``(1, kv_heads, >= whole-block tokens, head_dim)`` of that
                prompt, its tokens in order from column 0 (copied here; the caller may reuse them).
        """
        length = len(token_ids) // BLOCK_TOKENS * BLOCK_TOKENS
        if length == 0 or self.max_bytes == 0:
            return
        hashes = block_hashes(token_ids[:length])
        held = self._index.get(hashes[-1])
        if held is not None and held.tokens[:length] == tuple(token_ids[:length]):
            self._entries[id(held)]  # noqa: B018 - a read makes it the most recently used
            return
        copied = [(k[:, :, :length].clone(), v[:, :, :length].clone()) for k, v in layers]
        nbytes = sum(k.nbytes + v.nbytes for k, v in copied)
        if nbytes > self.max_bytes:
            return
        entry = _Entry(tuple(int(t) for t in token_ids[:length]), copied, hashes, nbytes)
        self._entries[id(entry)] = entry  # evicts the least recently used past the budget first
        for value in hashes:
            self._index[value] = entry

    def _unindex(self, entry: _Entry) -> None:
        for value in entry.hashes:
            if self._index.get(value) is entry:
                del self._index[value]

    def clear(self) -> None:
        """Drop every entry (counters are kept)."""
        self._entries.clear()
        self._index.clear()
