"""The service's engines behind :class:`guardrail.engines.base.Engine`, built from the settings.

``GUARDRAIL_ENGINE`` picks one (docs/engines.md):

- ``transformers`` (default): :class:`EmbeddedEngine`, the model's weights in this process, continuous
  batching, rollback by cropping the KV cache;
- ``vllm``: :class:`VLLMEngine`, an in-process vLLM engine (the ``vllm`` extra); no transformers weights;
- ``remote``: :class:`~guardrail.engines.remote.engine.RemoteEngine`, a gateway to an inference server
  that already runs (``GUARDRAIL_UPSTREAM_URL``); tokenizer only.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

from guardrail.engines.base import Engine, EngineCapabilities, EngineHealth, ModelConfig
from guardrail.guard.events import Event
from guardrail.matching.combined import ArtefactLike
from guardrail.matching.vocab import TokenVocab
from guardrail.params import SamplingParams
from service.settings import Settings


class EmbeddedEngine:
    """The transformers model in this process: :class:`BatchedDecoder` over a :class:`StreamingDecoder`.

    Attributes:
        model: the loaded model.
        decoder: the single-stream decoder the batch loop drives.
        batched: the continuous-batching loop.
    """

    name = "transformers"

    def __init__(self, settings: Settings, tokenizer: Any, vocab: TokenVocab, on_step=None) -> None:
        from guardrail.engines.drafting import SpeculativeConfig
        from guardrail.engines.transformers.batched import BatchedDecoder
        from guardrail.engines.transformers.decoder import StreamingDecoder
        from guardrail.models import load_model

        self.model = load_model(settings.model)
        self.decoder = StreamingDecoder(self.model, tokenizer, vocab,
                                        speculative=SpeculativeConfig(num_tokens=settings.speculative_tokens))
        self.batched = BatchedDecoder(
            self.decoder, max_batch=settings.max_batch, prefill_chunk=settings.prefill_chunk,
            prefix_cache_bytes=settings.prefix_cache_mb * 2**20, on_step=on_step)
        self.capacity = settings.max_batch
        self.context_length = int(self.model.config.get_text_config().max_position_embeddings)
        self.num_logits = len(vocab)
        # Every request field, and the model's config for the watermark detector.
        self.capabilities = EngineCapabilities(model_config=ModelConfig.of(self.model.config), structured_output=True,
                                               watermark=True, logprobs=True)

    def start(self) -> None:
        self.batched.start()

    def close(self) -> None:
        self.batched.stop()

    def health(self) -> EngineHealth:
        if self.batched.alive:
            return EngineHealth(True, "batch decoding loop running")
        return EngineHealth(False, "the batch decoding loop is not running")

    def stream(self, prompt_ids: Sequence[int], artefact: ArtefactLike | None, params: SamplingParams,
               cancel: threading.Event) -> Iterator[Event]:
        return self.batched.stream(list(prompt_ids), artefact, params, cancel)


class VLLMEngine:
    """An in-process vLLM engine (:class:`~guardrail.engines.vllm.driver.VLLMDriver`): vLLM loads the
    weights, the service only the tokenizer."""

    name = "vllm"

    def __init__(self, settings: Settings, vocab: TokenVocab) -> None:
        from guardrail.engines.vllm.driver import UNSUPPORTED, VLLMDriver, VLLMUsage

        self.driver = VLLMDriver.load(settings.model, vocab=vocab, kv_cache_gib=settings.vllm_kv_cache_gib,
                                      **settings.vllm_engine_args)
        self.capacity = settings.max_batch
        self.context_length = int(self.driver.max_model_len)
        self.num_logits = int(self.driver.num_logits)
        hf_config = self.driver.engine.model_config.hf_config
        # vLLM's logits width is the model config's vocab_size: the watermark detector scores with the model's
        # own config (text watermarked by an embedded replica of the same model is detected here too).
        self.capabilities = EngineCapabilities.refusing(
            UNSUPPORTED, model_config=ModelConfig(self.num_logits, hf_config.bos_token_id), usage=VLLMUsage,
            global_metrics_prefix="vllm:")

    def start(self) -> None:
        """The driver's engine thread runs from :meth:`VLLMDriver.load` on."""

    def close(self) -> None:
        self.driver.close()

    def health(self) -> EngineHealth:
        if self.driver.alive:
            return EngineHealth(True, "engine loop running")
        return EngineHealth(False, "the vLLM engine loop is not running")

    def stream(self, prompt_ids: Sequence[int], artefact: ArtefactLike | None, params: SamplingParams,
               cancel: threading.Event) -> Iterator[Event]:
        return self.driver.stream(prompt_ids, artefact=artefact, params=params, cancel=cancel)


def build_engine(settings: Settings, tokenizer: Any, vocab: TokenVocab, on_step=None) -> Engine:
    """The engine ``settings.engine`` names (loads weights for ``transformers`` and ``vllm``; the remote
    engine connects only in :meth:`Engine.start`).

    Raises:
        ValueError: ``engine=remote`` without ``upstream_url``.
        OSError / ValueError from the model loader.
    """
    if settings.engine == "vllm":
        return VLLMEngine(settings, vocab)
    if settings.engine == "remote":
        from guardrail.engines.remote.engine import RemoteEngine

        if not settings.upstream_url:
            raise ValueError("GUARDRAIL_ENGINE=remote needs GUARDRAIL_UPSTREAM_URL (guardrail serve --upstream URL)")
        return RemoteEngine(settings.upstream_url, tokenizer, vocab, model=settings.upstream_model,
                            api=settings.upstream_api, logits_processor=settings.upstream_logits_processor,
                            capacity=settings.upstream_max_streams,
                            connect_timeout_s=settings.upstream_connect_timeout_s,
                            read_timeout_s=settings.upstream_read_timeout_s, retries=settings.upstream_retries,
                            health_interval_s=settings.upstream_health_interval_s,
                            retry_after_s=settings.retry_after_s)
    return EmbeddedEngine(settings, tokenizer, vocab, on_step)
