"""One KV cache for many rows (continuous batching), rolled back per row without a forward pass.

Layout: one transformers ``DynamicCache`` whose layers hold ``(rows, kv_heads, columns, head_dim)`` keys and
values, a boolean attention mask ``(rows, columns)`` saying which column holds a live token of which row,
and explicit position ids per row (the row's live token count). Every step appends one column for all
rows. Then:

* **rollback of one row** sets that row's mask to 0 on the columns after its kept tokens: they become
  *holes*. No tensor is copied, no other row changes, and no forward pass is spent (the decoder re-picks
  from kept logits). The row's next token gets position id = its kept token count, so RoPE sees the same
  positions as when the row is decoded alone; the mask keeps its queries off the holes.
* **compaction**: when a row's holes pass ``compact_at`` columns, its live columns are gathered to the
  right end (``index_select`` on the column dim of that row, every layer) and the leading columns that
  are holes in every row are trimmed. Keys carry their RoPE rotation already, so moving a column does
  not change what it means; the causal mask only compares a query column with earlier columns, all of
  which stay earlier.
* **join**: a new row is prefilled batch-1 (its own ``DynamicCache``, in chunks when long, see
  :class:`RowPrefill`) and concatenated on the batch dim, left-padded with mask-0 columns (or the batch
  is left-padded when the new row is longer).
* **leave**: ``index_select`` of the remaining rows on the batch dim, then the trim.

Why this layout: it keeps transformers' own cache, mask builder (``masking_utils.create_causal_mask``
reads a 2-D padding mask with holes as it reads left padding) and attention kernels (sdpa or eager)
unchanged, and rollback is an O(1)-ish mask write. A preallocated cache with a length pointer per row
(Medusa's KV cache, Cai et al. 2024, arXiv:2401.10774) makes rollback a pointer move too, but needs
right-aligned per-row writes, which transformers' attention layers do not do (they ``cat`` a column for
every row), so it would mean our own attention path. Paged blocks (vLLM's PagedAttention, Kwon et al.
2023) need a paged attention kernel, which CPU transformers lacks. What ours costs: every step attends
over all ``columns`` for every row, holes and padding included (compute and memory grow with the longest
row's span, not its live length: bounded by ``compact_at`` holes per row); a join or a compaction copies
the cache (``torch.cat`` / gather, once per event, not per step).

Sliding-window layers (Gemma 3): a ``DynamicSlidingWindowLayer`` keeps the last ``window - 1`` *columns*
and its mask counts columns, so holes and padding would shift every row's window. :class:`BatchKVCache`
refuses such models (``ValueError``); the batched decoder falls back to batch-1 for them
(:mod:`guardrail.engines.transformers.batched`).

Source: transformers 5.23 ``cache_utils.DynamicLayer`` (keys/values ``cat`` on dim -2) and
``masking_utils`` (2-D mask -> 4-D: ``causal(q_col, kv_col) and mask[row, kv_col]``, column-indexed).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import cast

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from guardrail.engines.transformers.kv_cache import has_sliding_layers

#: Holes a row may hold before it is compacted. A hole costs one masked column per step for the batch;
#: compaction copies the row's whole cache once. 64 columns ~ one rollback of a long phrase plus slack.
DEFAULT_COMPACT_AT = 64
#: Prompt tokens per prefill forward pass: a long prompt is prefilled in chunks so running rows get a
#: decode step between chunks (a 2,048-token prompt costs SmolLM2 ~1 s on 2 cores in one pass).
DEFAULT_PREFILL_CHUNK = 256


class RowPrefill:
    """The batch-1 prefill of one joining row, fed in chunks.

    Args:
        model: the causal LM.
        token_ids: the prompt, not empty.
        chunk: prompt tokens per forward pass (>= 1).

    Attributes:
        cache: the row's own ``DynamicCache`` (full-attention layers only).
        done: True once every prompt token was fed; then ``logits`` holds the next-token logits
            ``(1, vocab)`` float32.
        forward_passes: chunks fed so far.

    Raises:
        ValueError: empty ``token_ids`` or ``chunk < 1``.
    """

    def __init__(self, model, token_ids: Sequence[int], chunk: int = DEFAULT_PREFILL_CHUNK):
        if not token_ids:
            raise ValueError("token_ids must not be empty")
        if chunk < 1:
            raise ValueError(f"chunk must be >= 1, got {chunk}")
        self.model = model
        self.token_ids = [int(t) for t in token_ids]
        self.chunk = chunk
        self.cache = DynamicCache(config=model.config)
        self.fed = 0
        self.forward_passes = 0
        self.logits: torch.Tensor | None = None

    @property
    def done(self) -> bool:
        return self.fed == len(self.token_ids)

    @torch.inference_mode()
    def advance(self) -> bool:
        """Feed the next chunk (one forward pass); return :attr:`done`."""
        piece = self.token_ids[self.fed:self.fed + self.chunk]
        ids = torch.tensor([piece], dtype=torch.long)
        out = self.model(input_ids=ids, past_key_values=self.cache, use_cache=True, logits_to_keep=1)
        self.fed += len(piece)
        self.forward_passes += 1
        if self.done:
            self.logits = out.logits[:, -1, :].float()
        return self.done


def _pad_left(tensor: torch.Tensor, columns: int) -> torch.Tensor:
    """``tensor`` (rows, heads, cols, dim) with ``columns`` zero columns in front (masked out: never read)."""
    if columns == 0:
        return tensor
    shape = list(tensor.shape)
    shape[-2] = columns
    return torch.cat([tensor.new_zeros(shape), tensor], dim=-2)


def _dynamic_layers(cache: DynamicCache) -> list[DynamicLayer]:
    layers = cache.layers
    if any(type(layer) is not DynamicLayer for layer in layers):
        raise TypeError("BatchKVCache holds DynamicLayer layers only")
    return cast("list[DynamicLayer]", layers)  # checked just above


def _kv(layer: DynamicLayer) -> tuple[torch.Tensor, torch.Tensor]:
    """``(keys, values)`` of a filled layer, each ``(rows, heads, columns, head_dim)``; transformers types
    them Optional (``None`` before the layer's first update, which every prefilled layer has had)."""
    keys, values = layer.keys, layer.values
    assert keys is not None and values is not None, "a prefilled layer holds keys and values"
    return keys, values


class BatchKVCache:
    """The KV cache, attention mask and position ids of the running rows.

    Rows are named by any hashable key (the decoder uses its row objects); their batch index changes as
    rows leave, the key does not.

    Args:
        model: a transformers causal LM whose cache has full-attention layers only.
        compact_at: holes a row may hold before its cache is compacted (>= 0).

    Attributes:
        cache: the shared ``DynamicCache`` (``None`` while no row ever joined).
        mask: ``(rows, columns)`` bool: column ``c`` holds a live token of row ``r``.
        compactions: rows compacted so far (for tests and benchmarks).

    Raises:
        ValueError: the model has sliding-window (or other non-full-attention) cache layers.
    """

    def __init__(self, model, compact_at: int = DEFAULT_COMPACT_AT):
        if has_sliding_layers(model):
            raise ValueError("BatchKVCache needs full-attention layers only; this model has sliding-window layers")
        if compact_at < 0:
            raise ValueError(f"compact_at must be >= 0, got {compact_at}")
        self.model = model
        self.compact_at = compact_at
        self.cache: DynamicCache | None = None
        self.mask = torch.zeros((0, 0), dtype=torch.bool)
        self.keys: list[Hashable] = []
        self._lengths: list[int] = []
        self.compactions = 0

    # -- shape ---------------------------------------------------------------------------------------
    def __len__(self) -> int:
        """Rows held."""
        return len(self.keys)

    @property
    def columns(self) -> int:
        return self.mask.shape[1]

    def length(self, key: Hashable) -> int:
        """Live tokens of row ``key`` (its next position id)."""
        return self._lengths[self.keys.index(key)]

    def holes(self, key: Hashable) -> int:
        """Masked columns after the first live column of row ``key`` (rolled-back positions)."""
        row = self.keys.index(key)
        live = self.mask[row]
        first = int(live.to(torch.uint8).argmax())
        return self.columns - first - self._lengths[row]

    def _layers(self) -> list[DynamicLayer]:
        assert self.cache is not None, "only called while rows are held"
        return _dynamic_layers(self.cache)

    # -- rows join and leave -------------------------------------------------------------------------
    @torch.inference_mode()
    def join(self, key: Hashable, prefill: RowPrefill) -> None:
        """Add a prefilled row (its cache is moved in; the prefill must not be used afterwards).

        Raises:
            ValueError: ``key`` is already a row, or the prefill is not done.
        """
        if key in self.keys:
            raise ValueError("this row already joined")
        if not prefill.done:
            raise ValueError("the row's prefill is not done")
        length = len(prefill.token_ids)
        if self.cache is None or not self.keys:
            self.cache = prefill.cache
            self.mask = torch.ones((1, length), dtype=torch.bool)
        else:
            columns = max(self.columns, length)
            for layer, new in zip(self._layers(), _dynamic_layers(prefill.cache), strict=True):
                (keys, values), (new_keys, new_values) = _kv(layer), _kv(new)
                layer.keys = torch.cat([_pad_left(keys, columns - self.columns),
                                        _pad_left(new_keys, columns - length)], dim=0)
                layer.values = torch.cat([_pad_left(values, columns - self.columns),
                                          _pad_left(new_values, columns - length)], dim=0)
            row = torch.zeros((1, columns), dtype=torch.bool)
            row[0, columns - length:] = True
            old = torch.cat([torch.zeros((len(self.keys), columns - self.columns), dtype=torch.bool), self.mask], 1)
            self.mask = torch.cat([old, row], dim=0)
        self.keys.append(key)
        self._lengths.append(length)

    @torch.inference_mode()
    def leave(self, key: Hashable) -> None:
        """Drop row ``key`` (index_select on the batch dim), then trim all-hole leading columns.

        Raises:
            ValueError: ``key`` is not a row.
        """
        row = self.keys.index(key)
        del self.keys[row]
        del self._lengths[row]
        if not self.keys:
            self.cache = None
            self.mask = torch.zeros((0, 0), dtype=torch.bool)
            return
        keep = torch.tensor([r for r in range(len(self.keys) + 1) if r != row], dtype=torch.long)
        for layer in self._layers():
            keys, values = _kv(layer)
            layer.keys = keys.index_select(0, keep)
            layer.values = values.index_select(0, keep)
        self.mask = self.mask.index_select(0, keep)
        self._trim()

    def _trim(self) -> None:
        """Slice off leading columns that are holes (or padding) in every row."""
        used = self.mask.any(dim=0)
        first = int(used.to(torch.uint8).argmax()) if bool(used.any()) else self.columns
        if first == 0:
            return
        for layer in self._layers():
            keys, values = _kv(layer)
            layer.keys = keys[:, :, first:, :]
            layer.values = values[:, :, first:, :]
        self.mask = self.mask[:, first:]

    # -- rollback ------------------------------------------------------------------------------------
    @torch.inference_mode()
    def rollback_to(self, key: Hashable, length: int) -> None:
        """Keep the first ``length`` live tokens of row ``key``; its later columns become holes.

        No forward pass, no copy (unless the holes pass ``compact_at``: then the row is compacted); other
        rows are untouched.

        Raises:
            ValueError: ``length`` outside ``[1, length(key)]`` (the prompt is never rolled back whole).
        """
        row = self.keys.index(key)
        held = self._lengths[row]
        if not 1 <= length <= held:
            raise ValueError(f"length must be in [1, {held}], got {length}")
        if length == held:
            return
        live = self.mask[row].nonzero().squeeze(1)
        self.mask[row, live[length:]] = False
        self._lengths[row] = length
        if self.holes(key) > self.compact_at:
            self.compact(key)

    @torch.inference_mode()
    def compact(self, key: Hashable) -> None:
        """Gather row ``key``'s live columns to the right end, then trim all-hole leading columns."""
        row = self.keys.index(key)
        live = self.mask[row].nonzero().squeeze(1)
        count = len(live)
        for layer in self._layers():
            keys, values = _kv(layer)
            keys[row, :, self.columns - count:, :] = keys[row].index_select(1, live)
            values[row, :, self.columns - count:, :] = values[row].index_select(1, live)
        self.mask[row] = False
        self.mask[row, self.columns - count:] = True
        self.compactions += 1
        self._trim()

    # -- the step ------------------------------------------------------------------------------------
    @torch.inference_mode()
    def forward(self, token_ids: Sequence[int]) -> torch.Tensor:
        """Feed one token per row (in :attr:`keys` order) as a new column; return the next-token logits
        ``(rows, vocab)`` float32.

        Raises:
            ValueError: not exactly one token per row.
        """
        if len(token_ids) != len(self.keys) or not self.keys:
            raise ValueError(f"need one token per row ({len(self.keys)}), got {len(token_ids)}")
        ids = torch.tensor(token_ids, dtype=torch.long).unsqueeze(1)
        positions = torch.tensor(self._lengths, dtype=torch.long).unsqueeze(1)
        mask = torch.cat([self.mask, torch.ones((len(self.keys), 1), dtype=torch.bool)], dim=1)
        # No padding and no holes (a lone row, or rows of equal length): no mask at all, so that sdpa takes
        # its unmasked path, as the single-stream decoder does. Same result: every column is attended.
        full = bool(self.mask.all())
        out = self.model(input_ids=ids, attention_mask=None if full else mask, position_ids=positions,
                         past_key_values=self.cache, use_cache=True, logits_to_keep=1)
        self.mask = mask
        self._lengths = [n + 1 for n in self._lengths]
        return out.logits[:, -1, :].float()
