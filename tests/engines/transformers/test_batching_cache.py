"""The batched KV cache: padding, joins at different steps and one row's rollback holes change no row's result.

Reference: each prompt decoded alone with the single-stream cache (``KVCache``, cropped on rollback), greedy,
float32 SmolLM2. The batch: 8 prompts of different lengths, joining at different steps; one row decodes
past a point, rolls back to it (holes), is forced onto another token there and decodes on, while its
neighbours do not roll back. Every row's tokens must equal its reference.
"""


import pytest
import torch
from helpers.paths import load_data
from transformers.masking_utils import create_causal_mask

from guardrail.engines.transformers import batch_cache
from guardrail.engines.transformers.batch_cache import BatchKVCache, Prefill
from guardrail.engines.transformers.kv_cache import KVCache
from guardrail.engines.transformers.prefix_cache import PrefixCache
from guardrail.prompts import prompt_ids

pytestmark = pytest.mark.slow

LEAKS = load_data("leak_prompts.json")
STEPS = 24
#: The row that rolls back: decodes to ROLLBACK_FROM, goes back to ROLLBACK_TO and is forced onto its
#: second-best token there.
ROLLER, ROLLBACK_TO, ROLLBACK_FROM = 3, 6, 14


def prompts(tokenizer, count=8):
    out = []
    for i, case in enumerate(LEAKS[:count]):
        content = case["prompt"] + " Please explain in detail." * (3 * i)  # lengths differ row to row
        out.append(prompt_ids(tokenizer, messages=[{"role": "user", "content": content}]))
    return out


def decode_alone(model, prompt, forced_at=None):
    """Greedy tokens of ``prompt`` alone; at ``forced_at`` take the second-best token instead."""
    kv = KVCache(model)
    logits = kv.forward(prompt)
    tokens = []
    for position in range(STEPS):
        ranked = logits[0].topk(2).indices
        token = int(ranked[1] if position == forced_at else ranked[0])
        tokens.append(token)
        logits = kv.forward([token])
    return tokens


def test_model_attends_with_sdpa_and_a_hole_is_masked_in_4d(smollm2_model):
    assert smollm2_model.config._attn_implementation == "sdpa"
    cache = BatchKVCache(smollm2_model)
    for key, prompt in (("a", [1, 2, 3, 4, 5]), ("b", [6, 7])):
        prefill = Prefill(smollm2_model, [prompt])
        prefill.advance()
        assert prefill.done
        cache.join([key], prefill)
    cache.forward([8, 9])
    cache.rollback_to("a", 4)  # a's 5th and 6th tokens become holes
    mask2d = torch.cat([cache.mask, torch.ones((2, 1), dtype=torch.bool)], dim=1)
    embeds = torch.zeros((2, 1, smollm2_model.config.hidden_size))
    mask4d = create_causal_mask(config=smollm2_model.config, inputs_embeds=embeds, attention_mask=mask2d,
                                past_key_values=cache.cache, position_ids=torch.tensor([[4], [3]]))
    assert mask4d.dtype == torch.bool and mask4d.shape == (2, 1, 1, 7)
    assert mask4d[0, 0, 0].tolist() == [True, True, True, True, False, False, True]
    assert mask4d[1, 0, 0].tolist() == [False, False, False, True, True, True, True]
    assert cache.holes("a") == 2 and cache.length("a") == 4 and cache.length("b") == 3


def test_each_row_in_a_batch_of_8_equals_its_prompt_decoded_alone(smollm2_model, smollm2_tokenizer):
    rows = prompts(smollm2_tokenizer)
    assert len({len(p) for p in rows}) == 8
    expected = [decode_alone(smollm2_model, p, ROLLBACK_TO if i == ROLLER else None) for i, p in enumerate(rows)]

    cache = BatchKVCache(smollm2_model, compact_at=4)  # low: the roller's 8 holes force a compaction
    joins_at = {i: i // 2 * 3 for i in range(8)}  # rows join at steps 0, 3, 6, 9
    tokens = {i: [] for i in range(8)}
    kept = {}  # (row, position) -> logits, the kept-logits trick
    pending = {}
    rolled_back = False
    step = 0
    while any(len(t) < STEPS for t in tokens.values()):
        for i, at in joins_at.items():
            if at == step:
                prefill = Prefill(smollm2_model, [rows[i]], chunk=16)  # chunked: long prompts take passes
                while not prefill.done:
                    prefill.advance()
                assert prefill.forward_passes > 1
                cache.join([i], prefill)
                pending[i] = prefill.logits[0]
        active = [i for i in cache.keys]
        feed = []
        for i in active:
            position = len(tokens[i])
            kept[i, position] = pending[i]
            if i == ROLLER and position == ROLLBACK_FROM and not rolled_back:
                rolled_back = True
                cache.rollback_to(i, len(rows[i]) + ROLLBACK_TO)  # keep the prompt and the first 6 tokens
                del tokens[i][ROLLBACK_TO:]
                token = int(kept[i, ROLLBACK_TO].topk(2).indices[1])
            else:
                token = int(pending[i].argmax())
            tokens[i].append(token)
            feed.append(token)
        logits = cache.forward(feed)
        for row, i in enumerate(active):
            pending[i] = logits[row]
        for i in [i for i in active if len(tokens[i]) >= STEPS]:
            cache.leave(i)
        step += 1
    assert cache.compactions >= 1
    for i in range(8):
        assert tokens[i] == expected[i], f"row {i}"


def test_a_rollback_leaves_the_other_rows_cache_untouched(smollm2_model):
    cache = BatchKVCache(smollm2_model, compact_at=0)
    for key, prompt in (("a", [1, 2, 3]), ("b", [4, 5, 6, 7])):
        prefill = Prefill(smollm2_model, [prompt])
        prefill.advance()
        cache.join([key], prefill)
    for _ in range(3):
        cache.forward([10, 11])
    row_b = cache.keys.index("b")
    before = cache.cache.layers[0].keys[row_b][:, cache.mask[row_b]].clone()
    cache.rollback_to("a", 4)  # compaction at once (compact_at=0): a's live columns move right
    assert cache.compactions == 1 and cache.holes("a") == 0
    row_b = cache.keys.index("b")
    assert torch.equal(cache.cache.layers[0].keys[row_b][:, cache.mask[row_b]], before)
    assert cache.mask.sum(dim=1).tolist() == [4, 7]


def greedy_in_batch(model, groups):
    """Join each ``(keys, prefill)`` group (prefilled to the end), then decode STEPS greedy tokens per row."""
    cache = BatchKVCache(model, compact_at=10**6)
    pending = {}
    for keys, prefill in groups:
        while not prefill.done:
            prefill.advance()
        cache.join(keys, prefill)
        pending.update({key: prefill.logits[index] for index, key in enumerate(keys)})
    tokens = {key: [] for key in cache.keys}
    for _ in range(STEPS):
        feed = [int(pending[key].argmax()) for key in cache.keys]
        for key, token in zip(cache.keys, feed, strict=True):
            tokens[key].append(token)
        logits = cache.forward(feed)
        pending = {key: logits[row] for row, key in enumerate(cache.keys)}
    return tokens


def test_group_prefill_with_padding_chunks_and_cached_heads_equals_each_prompt_alone(smollm2_model,
                                                                                   smollm2_tokenizer):
    rows = prompts(smollm2_tokenizer)
    expected = [decode_alone(smollm2_model, p, None) for p in rows]
    # One group of 8 prompts of different lengths (right padding = holes), fed 24 tokens per pass.
    group = Prefill(smollm2_model, rows, chunk=24)
    assert group.width == max(len(p) for p in rows)
    tokens = greedy_in_batch(smollm2_model, [(list(range(8)), group)])
    assert group.forward_passes > 1
    assert [tokens[i] for i in range(8)] == expected
    # The same prompts again, their heads loaded from a prefix cache filled by that first prefill.
    heads = PrefixCache()
    first = Prefill(smollm2_model, rows)
    with pytest.raises(ValueError, match="not done"):
        first.prompt_layers(0)
    while not first.done:
        first.advance()
    for index, prompt in enumerate(rows):
        heads.insert(prompt, first.prompt_layers(index))
    found = [heads.match(p) for p in rows]
    assert all(h is not None and 0 < h.length < len(p) for h, p in zip(found, rows, strict=True))
    by_length = {}
    for index, head in enumerate(found):
        by_length.setdefault(head.length, []).append(index)
    groups = [(keys, Prefill(smollm2_model, [rows[i] for i in keys], heads=[found[i] for i in keys]))
              for keys in by_length.values()]
    tokens = greedy_in_batch(smollm2_model, groups)
    assert [tokens[i] for i in range(8)] == expected


def test_the_installed_transformers_slices_logits_to_keep_as_the_flag_says(smollm2_model):
    # A 2-D (rows, 1) logits_to_keep: one column per row from transformers 5.21, every row's column for each
    # row before it (hidden_states[:, keep]). PER_ROW_LOGITS_TO_KEEP picks the group prefill's form by it.
    ids = torch.tensor([[1, 2, 3], [4, 5, 6]])
    with torch.inference_mode():
        logits = smollm2_model(input_ids=ids, logits_to_keep=torch.tensor([[2], [0]])).logits
    per_row = logits.shape == (2, 1, smollm2_model.config.vocab_size)
    assert per_row == batch_cache.PER_ROW_LOGITS_TO_KEEP
    assert per_row or logits.shape == (2, 2, 1, smollm2_model.config.vocab_size)


@pytest.mark.parametrize("per_row", [True, False], ids=["per-row-logits-to-keep", "distinct-columns"])
def test_group_prefill_logits_equal_each_prompt_alone_in_either_slicing(smollm2_model, smollm2_tokenizer,
                                                                        monkeypatch, per_row):
    # Before transformers 5.21 the group prefill passes its rows' distinct last columns (1-D); on the pinned
    # version both forms run here. 8 prompts ending at different columns, some in different chunks.
    if per_row and not batch_cache.PER_ROW_LOGITS_TO_KEEP:
        pytest.skip("this transformers does not slice logits_to_keep per row (< 5.21)")
    monkeypatch.setattr(batch_cache, "PER_ROW_LOGITS_TO_KEEP", per_row)
    rows = prompts(smollm2_tokenizer)
    group = Prefill(smollm2_model, rows, chunk=96)
    while not group.done:
        group.advance()
    assert group.forward_passes > 1
    assert group.logits is not None and group.logits.shape == (8, smollm2_model.config.vocab_size)
    for row, prompt in enumerate(rows):
        alone = KVCache(smollm2_model).forward(prompt)[0]
        assert int(group.logits[row].argmax()) == int(alone.argmax())
        assert torch.allclose(group.logits[row], alone, atol=1e-3), float((group.logits[row] - alone).abs().max())


def test_a_head_must_leave_a_token_to_feed(smollm2_model):
    heads = PrefixCache()
    prompt = list(range(1, 18))
    first = Prefill(smollm2_model, [prompt])
    first.advance()
    heads.insert(prompt, first.prompt_layers(0))
    head = heads.match(prompt + [5])
    assert head is not None and head.length == 16
    with pytest.raises(ValueError, match="at least one prompt token"):
        Prefill(smollm2_model, [prompt[:16]], heads=[head])


def test_models_with_sliding_window_layers_are_refused(gemma3_model):
    with pytest.raises(ValueError, match="sliding-window"):
        BatchKVCache(gemma3_model)
