"""The engine interface: what the service needs from whatever generates tokens (docs/engines.md).

Three engines implement it: the embedded transformers engine (``service.engines.EmbeddedEngine``, batched,
the default), the in-process vLLM engine (``service.engines.VLLMEngine`` over
:class:`~guardrail.engines.vllm.driver.VLLMDriver`) and the gateway to a remote inference server
(:class:`~guardrail.engines.remote.engine.RemoteEngine`). Every one is a transport below the shared
:class:`~guardrail.guard.driver.DecodeDriver` (one per request, over its
:class:`~guardrail.guard.session.GuardSession`: cancel, deadline, room, judge, finish, usage) and yields the same
events (docs/design.md, "Layers"); only how a token is produced and how a rollback reaches the model differ
(crop the KV cache, or resubmit the prompt plus the kept tokens).

What an engine can do is declared, never inferred from its name: :class:`EngineCapabilities` (docs/engines.md,
"Writing an engine"). The service asks :attr:`Engine.capabilities`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from guardrail.guard.events import Event, Usage
from guardrail.matching.combined import ArtefactLike
from guardrail.params import SamplingParams

__all__ = ["Engine", "EngineCapabilities", "EngineHealth", "EngineUnavailable", "ModelConfig"]


class EngineUnavailable(RuntimeError):
    """The engine cannot take requests now (a remote upstream is down); the service answers 503 with
    ``Retry-After`` before a stream starts.

    Attributes:
        retry_after_s: a hint for the client, seconds.
    """

    def __init__(self, message: str, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class EngineHealth:
    """Whether the engine can take requests.

    Attributes:
        ok: ``False``: new requests get 503 (``Retry-After``), ``/readyz`` says why.
        detail: what was checked, or the failure (no user text).
    """

    ok: bool
    detail: str = ""


@dataclass(frozen=True)
class ModelConfig:
    """What the service reads of the served model's config (the watermark detector's inputs).

    Attributes:
        vocab_size: width of the model's logits rows, token ids (``config.get_text_config().vocab_size``: the
            green lists are drawn over it, so it must be the generating model's).
        bos_token_id: the model's beginning-of-sequence id (``None``: it has none).
    """

    vocab_size: int
    bos_token_id: int | None

    @classmethod
    def of(cls, config: Any) -> ModelConfig:
        """From a transformers ``PretrainedConfig`` (its text config's ``vocab_size``, its ``bos_token_id``)."""
        return cls(int(config.get_text_config().vocab_size), config.bos_token_id)


@dataclass(frozen=True)
class EngineCapabilities:
    """What an engine supports, declared by the engine (the service asks this, never the engine's name).

    Attributes:
        model_config: the served model's config (:class:`ModelConfig`), or ``None`` when the engine does not
            know it (a gateway sees the upstream's tokenizer only): ``/v1/watermark/detect`` then answers 400
            naming the engine.
        structured_output: ``response_format`` and tool-call grammars, rolled back with the guard (400
            ``unsupported_parameter`` naming the field otherwise).
        watermark: ``SamplingParams.watermark`` at generation.
        logprobs: ``SamplingParams.logprobs`` (the picks' logprobs and ``top_logprobs``).
        usage: the :class:`~guardrail.guard.events.Usage` class its :class:`Finish` events carry (its own
            counters: ``VLLMUsage``, ``RemoteUsage``).
        upstream: generation runs in a server this process does not own: when its health fails, ``/readyz``
            says ``degraded`` (restarting this process would not help) rather than ``unavailable``.
        global_metrics_prefix: the engine records its own metrics in prometheus-client's process-wide
            registry under names with this prefix (vLLM: ``vllm:``); ``/metrics`` hands them on. ``None``: none.
    """

    model_config: ModelConfig | None = None
    structured_output: bool = False
    watermark: bool = False
    logprobs: bool = False
    usage: type[Usage] = Usage
    upstream: bool = False
    global_metrics_prefix: str | None = None

    @classmethod
    def refusing(cls, unsupported: Sequence[str], **fields: Any) -> EngineCapabilities:
        """The capabilities of an engine that refuses the :class:`SamplingParams` fields ``unsupported``
        (:func:`check_request`): ``structured_output``, ``watermark`` and ``logprobs`` follow from them."""
        return cls(structured_output="response_format" not in unsupported, watermark="watermark" not in unsupported,
                   logprobs="logprobs" not in unsupported, **fields)


def check_request(prompt_ids: Sequence[int], params: SamplingParams, *, num_logits: int, max_model_len: int,
                  unsupported: Sequence[str], engine: str) -> list[int]:
    """Check a request before an engine takes it; returns the prompt as a list of ints.

    Args:
        unsupported: :class:`SamplingParams` fields the engine does not implement (set to a non-default value
            they are refused); ``engine`` names it in the message.

    Raises:
        ValueError: an empty prompt, a token id outside ``[0, num_logits)``, a prompt of ``max_model_len`` tokens
            or more, an unsupported parameter (named), or a parameter's token id outside the vocab.
    """
    prompt = [int(t) for t in prompt_ids]
    if not prompt:
        raise ValueError("prompt_ids must not be empty")
    bad = [t for t in prompt if not 0 <= t < num_logits]
    if bad:
        raise ValueError(f"prompt_ids: token ids must be in [0, {num_logits}), got {bad[:10]}")
    if len(prompt) >= max_model_len:
        raise ValueError(f"prompt_ids: {len(prompt)} tokens, the {engine}'s max_model_len is {max_model_len}")
    defaults = SamplingParams()
    refused = [name for name in unsupported if getattr(params, name) != getattr(defaults, name)]
    if refused:
        # The field first: the service answers 400 naming it (service.generation._named_field).
        raise ValueError(f"{refused[0]}: not supported on the {engine} (refused: {refused})")
    params.check_vocab(num_logits)
    return prompt


@runtime_checkable
class Engine(Protocol):
    """A generation engine behind the service.

    Attributes:
        name: ``"transformers"``, ``"vllm"`` or ``"remote"`` (``GUARDRAIL_ENGINE``).
        capacity: generations the engine runs at once (the worker runs this many threads).
        context_length: prompt + completion tokens at most (the engine's real ``max_model_len``).
        num_logits: width of the model's logits rows (token ids a request may name are below it).
        capabilities: what it supports (:class:`EngineCapabilities`); read once the engine started (a
            gateway learns its upstream's API in :meth:`start`).
    """

    name: str
    capacity: int
    context_length: int
    num_logits: int
    capabilities: EngineCapabilities

    def start(self) -> None:
        """Start background work and check the engine can serve.

        Raises:
            RuntimeError: the engine cannot serve (a remote upstream down, another tokenizer), naming why.
        """

    def close(self) -> None:
        """Stop; streams in flight end with ``cancelled`` or an error."""

    def health(self) -> EngineHealth:
        """Cheap (no I/O on the caller's thread): the last known state."""

    def stream(self, prompt_ids: Sequence[int], artefact: ArtefactLike | None, params: SamplingParams,
               cancel: threading.Event) -> Iterator[Event]:
        """Generate after ``prompt_ids``, guarded by ``artefact`` (``None``: unguarded): :class:`TextDelta`
        and :class:`Rollback` events, then one :class:`Finish`. Runs on a worker thread.

        Raises:
            ValueError: a parameter the engine refuses (named), before any generation (answered 400).
            EngineUnavailable: the engine cannot take the request (answered 503 before a stream).
            RuntimeError: from the iterator, when generation failed midway (an SSE error event).
        """
