"""The KV cache of one request, rolled back by cropping, or rebuilt when it cannot crop.

Rolling back ``n`` tokens is ``DynamicCache.crop(-n)`` (transformers 5: a negative count removes that many
tokens; a positive one is refused). Full-attention layers (``DynamicLayer``) crop by slicing, whatever the
context length. Sliding-window layers (``DynamicSlidingWindowLayer``, Gemma 3: window 512) normally keep
only the last ``window - 1`` states, and refuse to crop once the window is full. With
``activate_past_recording()`` they keep every state until the next ``crop``, which rolls back and trims to
``window - 1`` again — so after a crop, a sliding layer can only go back as many tokens as were decoded
since. :meth:`KVCache.can_crop` checks exactly that, layer by layer; when a crop would be wrong the cache is
rebuilt by a forward pass over the kept tokens (a *re-prefill*, counted in :attr:`KVCache.reprefills`).

Memory note: recording the past means a sliding layer holds every token of the request until a rollback,
as a full-attention layer does (Gemma 3 270M in float32: ~36 KiB per token for all 18 layers).
Source: transformers 5.23 ``cache_utils.py`` (``DynamicLayer.crop``, ``DynamicSlidingWindowLayer.update/crop``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer


def has_sliding_layers(model) -> bool:
    """Whether ``model``'s cache has sliding-window layers (then rollback depends on past recording)."""
    return any(isinstance(layer, DynamicSlidingWindowLayer) for layer in DynamicCache(config=model.config).layers)


def _layer_can_crop(layer, n: int) -> bool:
    if isinstance(layer, DynamicSlidingWindowLayer):
        total = layer.get_seq_length()
        if total < layer.sliding_window:
            return True  # below the window the layer holds every state and crops like a full one
        if not layer.record_past:
            return False
        # After the crop the layer must still hold the window's worth of states before the cut.
        keys = layer.keys
        assert keys is not None, "a layer holding a window's worth of states has keys"
        held = keys.shape[-2]
        return held - n >= min(layer.sliding_window - 1, total - n)
    # Other layer kinds (linear attention, quantized, indexed) have their own crop rules: re-prefill.
    return type(layer) is DynamicLayer


class KVCache:
    """A ``DynamicCache`` over the prompt and the completion tokens decoded so far.

    Args:
        model: a transformers causal LM (``model(input_ids, past_key_values=..., logits_to_keep=1)``).
        record_past: call ``activate_past_recording()`` so that sliding-window layers can crop past their
            window (no effect on models without them). ``False`` forces the re-prefill path there.

    Attributes:
        length: tokens held (prompt + completion).
        forward_passes: forward calls so far (prefill and re-prefills count one each).
        reprefills: rollbacks done by rebuilding the cache.
    """

    def __init__(self, model, record_past: bool = True):
        self.model = model
        self.record_past = record_past
        self.length = 0
        self.forward_passes = 0
        self.reprefills = 0
        self.cache = self._new_cache()

    def _new_cache(self) -> DynamicCache:
        cache = DynamicCache(config=self.model.config)
        if self.record_past:
            cache.activate_past_recording()
        return cache

    @torch.inference_mode()
    def forward(self, token_ids: Sequence[int]) -> torch.Tensor:
        """Feed ``token_ids`` after the held ones; return the next-token logits ``(1, vocab)`` float32.

        Raises:
            ValueError: ``token_ids`` is empty.
        """
        if not token_ids:
            raise ValueError("token_ids must not be empty")
        ids = torch.tensor([list(token_ids)], dtype=torch.long)
        out = self.model(input_ids=ids, past_key_values=self.cache, use_cache=True, logits_to_keep=1)
        self.forward_passes += 1
        self.length += len(token_ids)
        return out.logits[:, -1, :].float()

    @torch.inference_mode()
    def forward_all(self, token_ids: Sequence[int]) -> torch.Tensor:
        """Feed ``token_ids`` after the held ones (speculative decoding's verification pass); return the
        logits after each of them, ``(len(token_ids), vocab)`` float32.

        Raises:
            ValueError: ``token_ids`` is empty.
        """
        if not token_ids:
            raise ValueError("token_ids must not be empty")
        ids = torch.tensor([list(token_ids)], dtype=torch.long)
        out = self.model(input_ids=ids, past_key_values=self.cache, use_cache=True, logits_to_keep=len(token_ids))
        self.forward_passes += 1
        self.length += len(token_ids)
        return out.logits[0].float()

    def can_crop(self, n: int) -> bool:
        """Whether dropping the last ``n`` tokens by ``crop(-n)`` leaves exactly the states of the rest."""
        return 0 <= n <= self.length and all(_layer_can_crop(layer, n) for layer in self.cache.layers)

    def rollback_to(self, length: int, token_ids: Sequence[int]) -> bool:
        """Keep the first ``length`` tokens: crop, or re-prefill from ``token_ids[:length]``.

        Args:
            length: tokens to keep (``<= self.length``; the prompt is never rolled back, so ``>= 1``).
            token_ids: prompt + completion ids, at least ``length`` long (only read for a re-prefill).

        Returns:
            True when the cache was rebuilt (its logits are not needed: the decoder kept the logits of
            every position it can roll back to).

        Raises:
            ValueError: ``length`` outside ``[1, self.length]``.
        """
        if not 1 <= length <= self.length:
            raise ValueError(f"length must be in [1, {self.length}], got {length}")
        n = self.length - length
        if n == 0:
            return False
        if self.can_crop(n):
            self.cache.crop(-n)
            self.length = length
            return False
        self.reprefill(token_ids[:length])
        return True

    def reprefill(self, token_ids: Sequence[int]) -> torch.Tensor:
        """Rebuild the cache from ``token_ids`` (one forward pass, counted as a re-prefill); return the
        next-token logits ``(1, vocab)``."""
        self.cache = self._new_cache()
        self.length = 0
        self.reprefills += 1
        return self.forward(token_ids)
