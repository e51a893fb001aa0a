"""The engines' side of the batch-level guard step: write a :class:`~guardrail.guard.batch.MaskIndex` into a
batch's logits in one indexed write (``logits[rows, cols] = -inf``).

The index is built on the host (numpy, ``guardrail/guard/batch.py``); this module owns the tensors made from it.
They are rebuilt only when the index's :attr:`~guardrail.guard.batch.MaskIndex.version` changes (a row's mask
changed, or rows joined, left or moved), so at steady state a step costs the write alone. On an accelerator the
copy is asynchronous from pinned host memory, as vLLM copies its own per-step inputs: the host does not wait
for the device, and the write is queued behind the forward pass on the same stream.

Used by vLLM's logits processor (:mod:`guardrail.engines.vllm.logits_processor`), the embedded engine's
:class:`~guardrail.engines.transformers.sampling.BatchBanMask`, and ``bench/batch_guard.py``.
"""

from __future__ import annotations

import math

import torch

from guardrail.guard.batch import MaskIndex

__all__ = ["MaskWriter"]


class MaskWriter:
    """Writes a batch's masked ids into its logits, keeping the index tensors while the index is unchanged.

    Args:
        device: where the logits live; the index is copied there (non-blocking) when it changes.
        pin_memory: stage that copy in pinned host memory (ignored on the CPU). Pinning is what makes a
            non-blocking host-to-device copy asynchronous; pass False where pinned memory is unavailable.

    Not thread-safe: one writer per engine step loop.
    """

    def __init__(self, device: torch.device, pin_memory: bool = False) -> None:
        self._device = device
        self._pin = pin_memory and device.type != "cpu"
        self._version = -1  # of the MaskIndex the cached tensors were built from (versions start at 1)
        self._index: tuple[torch.Tensor, torch.Tensor] | None = None

    @property
    def device(self) -> torch.device:
        """Where the logits it writes live."""
        return self._device

    def write(self, logits: torch.Tensor, index: MaskIndex) -> torch.Tensor:
        """Set ``logits[index.rows, index.cols]`` to ``-inf`` in place.

        Args:
            logits: ``float (rows, vocab)`` on the writer's device, one row per batch index.
            index: the batch's masked ids (``int64 (n,)`` rows and columns); an empty index writes nothing.

        Returns:
            ``logits`` itself.

        Raises:
            IndexError: an index points outside ``logits`` (on the CPU; a CUDA device reports it
                asynchronously as a device-side assertion).
        """
        if not len(index.rows):
            return logits
        if index.version != self._version:
            rows, cols = torch.from_numpy(index.rows), torch.from_numpy(index.cols)
            if self._device.type != "cpu":
                if self._pin:
                    rows, cols = rows.pin_memory(), cols.pin_memory()
                rows = rows.to(self._device, non_blocking=True)
                cols = cols.to(self._device, non_blocking=True)
            self._version, self._index = index.version, (rows, cols)
        assert self._index is not None
        logits[self._index] = -math.inf
        return logits
