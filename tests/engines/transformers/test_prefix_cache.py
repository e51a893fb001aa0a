"""The prefix cache: longest whole-block head, verified token by token, least recently used out by bytes.

Tensors here are random stand-ins for one prompt's keys and values (the cache never reads their contents);
the model-level check (a row prefilled from a cached head decodes as alone) is in tests/engines/transformers/test_batching_cache.py.
"""

import pytest
import torch

from guardrail.engines.transformers.prefix_cache import BLOCK_TOKENS, PrefixCache, block_hashes

LAYERS, HEADS, DIM = 3, 2, 4


def kv(tokens: int):
    """Per layer (keys, values) (1, HEADS, tokens, DIM) whose values name the column (to check slicing)."""
    column = torch.arange(tokens, dtype=torch.float32).view(1, 1, tokens, 1).expand(1, HEADS, tokens, DIM)
    return [(column.clone() + layer, -column.clone()) for layer in range(LAYERS)]


def nbytes(tokens: int) -> int:
    return LAYERS * 2 * HEADS * tokens * DIM * 4


def test_the_longest_whole_block_head_is_found_and_leaves_a_token_to_feed():
    cache = PrefixCache()
    prompt = list(range(100, 140))  # 40 tokens: 5 blocks
    cache.insert(prompt, kv(40))
    assert cache.match(prompt).length == 32  # all 40 would leave nothing to feed: the last block is not used
    longer = cache.match(prompt + [1, 2, 3])
    assert longer.length == 40
    keys, values = longer.layers[1]
    assert keys.shape == (1, HEADS, 40, DIM) and keys[0, 0, :, 0].tolist() == [c + 1.0 for c in range(40)]
    partly = cache.match(prompt[:20] + [7] * 30)  # shares 2 whole blocks and 4 more tokens
    assert partly.length == 16 and partly.layers[0][0].shape[2] == 16
    assert cache.match([7] * 30) is None
    assert cache.match(prompt[:BLOCK_TOKENS]) is None  # one block: nothing would be left to feed
    assert (cache.queries, cache.hits, cache.cached_tokens) == (5, 3, 32 + 40 + 16)


def test_a_hash_collision_is_a_miss_never_a_wrong_head():
    cache = PrefixCache()
    cache.insert(list(range(16)), kv(16))
    entry = next(iter(cache._index.values()))
    other = list(range(50, 67))
    for value in block_hashes(other):  # force the other prompt's block hashes onto this entry
        cache._index[value] = entry
    assert cache.match(other) is None


def test_entries_are_copies_and_least_recently_used_go_first_by_bytes():
    cache = PrefixCache(max_bytes=nbytes(16) * 2)
    a, b, c = list(range(16)), list(range(100, 116)), list(range(200, 216))
    layers = kv(16)
    cache.insert(a, layers)
    layers[0][0].zero_()  # the caller reuses its tensors: the cache holds its own copy
    cache.insert(b, kv(16))
    assert cache.match(a + [1]).layers[0][0][0, 0, 5, 0] == 5.0  # a is now the most recently used
    cache.insert(c, kv(16))  # over budget: b goes
    assert cache.match(b + [1]) is None and cache.match(a + [1]) is not None and cache.match(c + [1]) is not None
    assert len(cache) == 2 and cache.nbytes == nbytes(16) * 2


def test_inserting_a_held_prompt_adds_nothing_and_a_zero_budget_caches_nothing():
    cache = PrefixCache()
    cache.insert(list(range(24)), kv(24))
    cache.insert(list(range(24)) + [1, 2], kv(26))  # the same 3 whole blocks
    assert len(cache) == 1 and cache.nbytes == nbytes(24)
    off = PrefixCache(max_bytes=0)
    off.insert(list(range(24)), kv(24))
    assert len(off) == 0 and off.match(list(range(30))) is None
    with pytest.raises(ValueError, match="max_bytes"):
        PrefixCache(max_bytes=-1)
