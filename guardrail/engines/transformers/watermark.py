"""Green-list watermarking (Kirchenbauer et al. 2023, https://arxiv.org/abs/2306.04634) with transformers' own
``WatermarkLogitsProcessor`` and ``WatermarkDetector``.

Generation and detection must share the settings (:func:`watermarking_config`) and the model's vocab size.
The ``lefthash`` scheme seeds each green list with the previous token only, so text that went through
rollbacks is still detected: every kept token was picked from logits biased by the green list of the token
actually kept before it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from types import SimpleNamespace
from typing import Any, cast

import torch
from transformers import WatermarkDetector, WatermarkingConfig
from transformers.generation.logits_process import WatermarkLogitsProcessor

from guardrail.engines.base import ModelConfig
from guardrail.params import DEFAULT_HASHING_KEY

#: z-score above which text counts as watermarked (the paper uses 4.0: a false-positive rate of ~3e-5).
DEFAULT_Z_THRESHOLD = 4.0


def watermarking_config(hashing_key: int = DEFAULT_HASHING_KEY) -> WatermarkingConfig:
    """The settings used for generation and detection: green-list ratio 0.25, bias 2.0, ``lefthash``
    seeding on one previous token (transformers' defaults), with ``hashing_key``.

    Raises:
        ValueError: ``hashing_key`` is not a positive int.
    """
    if not isinstance(hashing_key, int) or isinstance(hashing_key, bool) or hashing_key <= 0:
        raise ValueError(f"hashing_key must be a positive int, got {hashing_key!r}")
    return WatermarkingConfig(hashing_key=hashing_key)


def watermark_processor(vocab_size: int, hashing_key: int = DEFAULT_HASHING_KEY,
                        device: str | torch.device = "cpu") -> WatermarkLogitsProcessor:
    """The logits processor ``generate`` would build for :func:`watermarking_config` (one per request: it
    holds a seeded ``torch.Generator``)."""
    return watermarking_config(hashing_key).construct_processor(vocab_size, device)


@dataclass(frozen=True)
class WatermarkVerdict:
    """What the detector says about one passage.

    Attributes:
        detected: ``z_score > z_threshold``.
        z_score: standard score of the green-token count against the ratio expected by chance.
        p_value: one-sided p-value of ``z_score``.
        green_fraction: green tokens / scored tokens.
        tokens_scored: tokens scored (all but the first ``context_width`` ones).
    """

    detected: bool
    z_score: float
    p_value: float
    green_fraction: float
    tokens_scored: int


_detector_lock = threading.Lock()


@lru_cache(maxsize=8)
def _detector(vocab_size: int, bos_token_id: int | None, hashing_key: int) -> WatermarkDetector:
    # Building one draws a 1M-entry permutation (~10 ms); the detector re-seeds its generator per n-gram,
    # so calls are serialised by _detector_lock. Keyed on the only config fields the detector reads
    # (transformers configs are unhashable).
    config = SimpleNamespace(vocab_size=vocab_size, bos_token_id=bos_token_id, is_encoder_decoder=False)
    # The detector reads only these attributes; its stub asks for a whole PreTrainedConfig.
    return WatermarkDetector(config, "cpu", watermarking_config(hashing_key))  # type: ignore[arg-type]


def detect_watermark(token_ids: Sequence[int], model_config: ModelConfig | Any, hashing_key: int = DEFAULT_HASHING_KEY,
                     z_threshold: float = DEFAULT_Z_THRESHOLD) -> WatermarkVerdict:
    """Score a passage (completion token ids, without the prompt) with transformers' ``WatermarkDetector``.

    Args:
        token_ids: the generated token ids (or ``tokenizer.encode(text, add_special_tokens=False)``).
        model_config: the generating model's :class:`~guardrail.engines.base.ModelConfig` (an engine's
            ``capabilities.model_config``), or its transformers config (its text config's ``vocab_size`` and
            its ``bos_token_id`` are used).
        hashing_key: the key used at generation.
        z_threshold: the decision threshold.

    Raises:
        ValueError: fewer than 2 tokens (nothing to score).
    """
    ids = [int(t) for t in token_ids]
    if len(ids) < 2:
        raise ValueError(f"token_ids: need at least 2 tokens to score a watermark, got {len(ids)}")
    config = model_config if isinstance(model_config, ModelConfig) else ModelConfig.of(model_config)
    with _detector_lock:
        detector = _detector(config.vocab_size, config.bos_token_id, hashing_key)
        input_ids = cast(torch.LongTensor, torch.tensor([ids]))  # int64; the stub wants the LongTensor class
        # Typed as an array or an output whose fields are all Optional; return_dict=True gives the output,
        # every field set.
        out: Any = detector(input_ids, z_threshold=z_threshold, return_dict=True)
    return WatermarkVerdict(
        detected=bool(out.prediction[0]),
        z_score=float(out.z_score[0]),
        p_value=float(out.p_value[0]),
        green_fraction=float(out.green_fraction[0]),
        tokens_scored=int(out.num_tokens_scored[0]),
    )
