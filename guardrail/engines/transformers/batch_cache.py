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
* **join**: new rows are prefilled as a group (one forward pass per chunk for the group, right-padded, see
  :class:`Prefill`; a prompt head found in the prefix cache is loaded, not fed) and concatenated on the
  batch dim, left-padded with mask-0 columns (or the batch is left-padded when the group is wider); a
  row's right padding is holes like any other.
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
from transformers import DynamicCache, modeling_utils
from transformers.cache_utils import DynamicLayer

from guardrail.engines.transformers.kv_cache import has_sliding_layers
from guardrail.engines.transformers.prefix_cache import CachedPrefix

#: Holes a row may hold before it is compacted. A hole costs one masked column per step for the batch;
#: compaction copies the row's whole cache once. 64 columns ~ one rollback of a long phrase plus slack.
DEFAULT_COMPACT_AT = 64
#: Prompt tokens (rows x columns) per prefill forward pass: a long prompt is prefilled in chunks so running
#: rows get a decode step between chunks (a 2,048-token prompt costs SmolLM2 ~1 s on 2 cores in one pass);
#: 512 takes the usual chat burst (8 prompts of < 64 tokens after the cached head) in one pass.
DEFAULT_PREFILL_CHUNK = 512
#: Whether this transformers slices a 2-D integer ``logits_to_keep`` per row (``(rows, n)`` column indices,
#: ``modeling_utils.slice_logits_to_keep``, transformers >= 5.21; BioGPT and CSM still do not in 5.23). Before
#: 5.21 the models indexed ``hidden_states[:, logits_to_keep]``: a 2-D tensor then gives ``(rows, rows, n,
#: vocab)`` logits (each row at every row's column), so :class:`Prefill` passes the chunk's distinct last
#: columns as a 1-D tensor instead: ``(rows, distinct columns, vocab)`` logits, the same values for more of
#: the output projection (SmolLM2, 8 rows of 4-11 new tokens each: 217 ms a pass instead of 190 on 2 cores).
PER_ROW_LOGITS_TO_KEEP = hasattr(modeling_utils, "slice_logits_to_keep")


class Prefill:
    """The prefill of a group of joining rows, in one forward pass per chunk for the whole group.

    Rows are right-padded to the longest prompt of the group (after the cached heads): a row's padding
    columns sit after its prompt, masked, so once the group joins the batch they are simply holes of that
    row (see the module docstring); every query of a padding column still sees its row's earlier tokens, so
    no attention row is empty. A long group is fed in chunks of ``chunk`` tokens (rows x columns) per
    forward pass, so running rows get a decode step between chunks.

    Args:
        model: the causal LM.
        prompts: one prompt per row, each not empty and longer than ``head.length``.
        chunk: tokens (rows x columns) per forward pass at most (>= 1; at least one column is fed).
        heads: optional, per row a :class:`~guardrail.engines.transformers.prefix_cache.CachedPrefix`
            of the same length for every row (``None`` for none): those prompt tokens are loaded, not fed.

    Attributes:
        cache: the group's own ``DynamicCache`` (full-attention layers only), ``(rows, kv_heads, columns,
            head_dim)`` per layer.
        mask: ``(rows, columns)`` bool, the live columns of each row.
        lengths: prompt tokens of each row (its next position id once done).
        head_length: tokens of each prompt loaded from ``heads`` (0 without).
        done: True once every prompt token was fed; then ``logits`` holds each row's next-token logits
            ``(rows, vocab)`` float32.
        forward_passes: chunks fed so far.

    Raises:
        ValueError: no rows, an empty prompt, ``chunk < 1``, heads of different lengths, or a head as long
            as its prompt.
    """

    def __init__(self, model, prompts: Sequence[Sequence[int]], chunk: int = DEFAULT_PREFILL_CHUNK,
                 heads: Sequence[CachedPrefix] | None = None):
        if not prompts or any(len(p) == 0 for p in prompts):
            raise ValueError("prompts must be a non-empty list of non-empty token id lists")
        if chunk < 1:
            raise ValueError(f"chunk must be >= 1, got {chunk}")
        self.model = model
        self.token_ids = [[int(t) for t in p] for p in prompts]
        self.chunk = chunk
        self.lengths = [len(p) for p in self.token_ids]
        self.cache = DynamicCache(config=model.config)
        self.head_length = 0
        if heads is not None:
            if len(heads) != len(prompts) or len({h.length for h in heads}) != 1:
                raise ValueError("heads: one per row, all of the same length")
            self.head_length = heads[0].length
            if self.head_length >= min(self.lengths):
                raise ValueError("heads: a head must leave at least one prompt token to feed")
            layers = _dynamic_layers(self.cache)
            for layer, parts in zip(layers, zip(*(h.layers for h in heads), strict=True), strict=True):
                layer.update(torch.cat([k for k, _ in parts]), torch.cat([v for _, v in parts]))
        rest = [p[self.head_length:] for p in self.token_ids]
        self.width = max(len(r) for r in rest)
        self._ids = torch.zeros((len(rest), self.width), dtype=torch.long)
        self.mask = torch.zeros((len(rest), self.head_length + self.width), dtype=torch.bool)
        self.mask[:, :self.head_length] = True
        for row, ids in enumerate(rest):
            self._ids[row, :len(ids)] = torch.tensor(ids)
            self.mask[row, self.head_length:self.head_length + len(ids)] = True
        self._last = torch.tensor([len(r) - 1 for r in rest])  # each row's last prompt column, after the head
        self.fed = 0  # columns after the head fed so far
        self.forward_passes = 0
        self.logits: torch.Tensor | None = None
        self._logits: list[torch.Tensor | None] = [None] * len(rest)

    @property
    def rows(self) -> int:
        return len(self.token_ids)

    @property
    def done(self) -> bool:
        return self.fed == self.width

    @torch.inference_mode()
    def advance(self, budget: int | None = None) -> int:
        """Feed the next chunk of columns (one forward pass) for every row.

        Args:
            budget: tokens (rows x columns) this pass may spend (default :attr:`chunk`); at least one
                column is fed whatever the budget.

        Returns:
            Tokens spent (rows x columns fed, padding included).
        """
        columns = max(1, min(self.chunk if budget is None else budget, self.chunk) // self.rows)
        columns = min(columns, self.width - self.fed)
        start = self.fed
        head = self.head_length
        ids = self._ids[:, start:start + columns]
        positions = torch.arange(head + start, head + start + columns).expand(self.rows, columns)
        mask = self.mask[:, :head + start + columns]
        # Each row's logits at its last prompt column (clamped into this chunk: rows that end elsewhere get
        # a column they ignore). No padding, no holes: no mask, so sdpa takes the causal path the single-stream
        # prefill takes.
        last = (self._last - start).clamp(0, columns - 1)
        if PER_ROW_LOGITS_TO_KEEP:
            keep, kept_at = last.unsqueeze(1), torch.zeros_like(last)  # (rows, 1, vocab): row r's own column
        else:  # (rows, distinct, vocab): row r's column is at kept_at[r]
            keep, kept_at = torch.unique(last, return_inverse=True)
        out = self.model(input_ids=ids, attention_mask=None if bool(mask.all()) else mask, position_ids=positions,
                         past_key_values=self.cache, use_cache=True, logits_to_keep=keep)
        self.fed += columns
        self.forward_passes += 1
        for row, (end, at) in enumerate(zip(self._last.tolist(), kept_at.tolist())):
            if start <= end < start + columns:
                self._logits[row] = out.logits[row, at].float()
        if self.done:
            self.logits = torch.stack([t for t in self._logits if t is not None])
        return self.rows * columns

    def prompt_layers(self, row: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Row ``row``'s prompt keys and values per layer, ``(1, kv_heads, prompt tokens, head_dim)`` views
        (its prompt sits in columns ``[0, lengths[row])``: the head, then the fed tokens).

        Raises:
            ValueError: the prefill is not done.
        """
        if not self.done:
            raise ValueError("the group's prefill is not done")
        length = self.lengths[row]
        layers = map(_kv, _dynamic_layers(self.cache))
        return [(k[row:row + 1, :, :length], v[row:row + 1, :, :length]) for k, v in layers]


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
    def join(self, keys: Sequence[Hashable], prefill: Prefill) -> None:
        """Add a prefilled group of rows, named ``keys`` (its cache is moved in: the prefill must not be used
        afterwards). The shorter of the batch and the group is left-padded with masked columns; a row whose
        right padding passes ``compact_at`` holes is compacted.

        Raises:
            ValueError: a key is already a row, ``keys`` does not name every row of the group, or the
                prefill is not done.
        """
        if any(key in self.keys for key in keys) or len(set(keys)) != len(keys):
            raise ValueError("a row joined twice")
        if len(keys) != prefill.rows:
            raise ValueError(f"need one key per prefilled row ({prefill.rows}), got {len(keys)}")
        if not prefill.done:
            raise ValueError("the group's prefill is not done")
        width = prefill.mask.shape[1]
        if self.cache is None or not self.keys:
            self.cache = prefill.cache
            self.mask = prefill.mask.clone()
        else:
            columns = max(self.columns, width)
            for layer, new in zip(self._layers(), _dynamic_layers(prefill.cache), strict=True):
                (old_keys, old_values), (new_keys, new_values) = _kv(layer), _kv(new)
                layer.keys = torch.cat([_pad_left(old_keys, columns - self.columns),
                                        _pad_left(new_keys, columns - width)], dim=0)
                layer.values = torch.cat([_pad_left(old_values, columns - self.columns),
                                          _pad_left(new_values, columns - width)], dim=0)
            old = torch.cat([torch.zeros((len(self.keys), columns - self.columns), dtype=torch.bool), self.mask], 1)
            joined = torch.cat([torch.zeros((prefill.rows, columns - width), dtype=torch.bool), prefill.mask], 1)
            self.mask = torch.cat([old, joined], dim=0)
        self.keys.extend(keys)
        self._lengths.extend(prefill.lengths)
        for key in keys:
            if self.holes(key) > self.compact_at:
                self.compact(key)

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

    @torch.inference_mode()
    def forward_spans(self, spans: Sequence[Sequence[int]]) -> list[torch.Tensor]:
        """Feed a span of tokens per row (in :attr:`keys` order; speculative decoding's verification) as
        ``w = max span`` new columns; a shorter span's extra columns are holes of its row. Returns, per row,
        the logits after each of its tokens, ``(len(span), vocab)`` float32.

        Raises:
            ValueError: not one non-empty span per row.
        """
        if len(spans) != len(self.keys) or not self.keys or any(not span for span in spans):
            raise ValueError(f"need one non-empty span per row ({len(self.keys)}), got {len(spans)}")
        width = max(len(span) for span in spans)
        rows = len(spans)
        ids = torch.zeros((rows, width), dtype=torch.long)
        live = torch.zeros((rows, width), dtype=torch.bool)
        for row, span in enumerate(spans):
            ids[row, :len(span)] = torch.tensor(list(span), dtype=torch.long)
            live[row, :len(span)] = True
        positions = torch.tensor(self._lengths, dtype=torch.long).unsqueeze(1) + torch.arange(width)
        mask = torch.cat([self.mask, live], dim=1)
        full = bool(mask.all())  # one row, or equal spans and no holes: sdpa's causal path, as alone
        out = self.model(input_ids=ids, attention_mask=None if full else mask, position_ids=positions,
                         past_key_values=self.cache, use_cache=True, logits_to_keep=0)
        self.mask = mask
        self._lengths = [n + len(span) for n, span in zip(self._lengths, spans, strict=True)]
        logits = out.logits.float()
        result = [logits[row, :len(span)].clone() for row, span in enumerate(spans)]
        for key in list(self.keys):
            if self.holes(key) > self.compact_at:
                self.compact(key)
        return result

