"""Every Prometheus metric of the service, declared once (names and meanings: docs/metrics.md).

The request-level histograms mean what vLLM's of the same name mean (vLLM docs, "Metrics": ``vllm:``
``time_to_first_token_seconds``, ``e2e_request_latency_seconds``, ``request_queue_time_seconds``,
``time_per_output_token_seconds``, ``prompt_tokens_total``), so dashboards read alike.

Metrics live in a per-app ``CollectorRegistry`` so that two apps in one process (tests) count apart;
``/metrics`` renders exactly that registry plus the standard process/platform/GC collectors.
"""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)

import guardrail

# Latency buckets in seconds: sub-millisecond check requests up to multi-minute generations.
_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
# Waits for the model reach minutes under load (63 s measured with a full queue on 2 cores): up to 480 s,
# as vLLM's TTFT buckets reach well past a minute.
_TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 120.0, 240.0, 480.0)
_TPOT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0)
_COMPILE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class ServiceMetrics:
    """The service's metrics, registered in ``registry``.

    Args:
        registry: where the metrics are registered (one registry per app).
        with_redis: declare ``guardrail_redis_up`` (absent when the embedded store is used).
        model: the served model, a label of ``guardrail_build_info``.
    """

    def __init__(self, registry: CollectorRegistry | None = None, *, with_redis: bool, model: str = "") -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)

        self.requests = Counter(
            "guardrail_requests", "HTTP requests answered.", ["endpoint", "status", "tenant"], registry=r
        )
        self.request_duration = Histogram(
            "guardrail_request_duration_seconds",
            "Wall time from request to last byte.",
            ["endpoint", "tenant"],
            buckets=_DURATION_BUCKETS,
            registry=r,
        )
        self.time_to_first_token = Histogram(
            "guardrail_time_to_first_token_seconds",
            "Request start to the first released text (streaming).",
            ["endpoint"],
            buckets=_TTFT_BUCKETS,
            registry=r,
        )
        self.e2e_request_latency = Histogram(
            "guardrail_e2e_request_latency_seconds",
            "Generation request admitted to its last choice finished (queue time included).",
            buckets=_DURATION_BUCKETS,
            registry=r,
        )
        self.request_queue_time = Histogram(
            "guardrail_request_queue_time_seconds",
            "Time a generation request waited for the model worker.",
            buckets=_TTFT_BUCKETS,
            registry=r,
        )
        self.time_per_output_token = Histogram(
            "guardrail_time_per_output_token_seconds",
            "Per choice: time after its first released text divided by the tokens kept after it.",
            buckets=_TPOT_BUCKETS,
            registry=r,
        )
        self.prompt_tokens = Counter(
            "guardrail_prompt_tokens", "Prompt tokens prefilled (once per choice).", registry=r
        )
        self.prompt_cached_tokens = Counter(
            "guardrail_prompt_cached_tokens",
            "Prompt tokens served from the prefix cache instead of prefilled "
            "(a subset of guardrail_prompt_tokens_total).",
            registry=r,
        )
        self.draft_tokens = Counter(
            "guardrail_draft_tokens", "Tokens drafted and verified in a forward pass (speculative decoding).",
            registry=r,
        )
        self.accepted_draft_tokens = Counter(
            "guardrail_accepted_draft_tokens",
            "Drafted tokens accepted (kept without a forward pass of their own; a subset of "
            "guardrail_draft_tokens_total).",
            registry=r,
        )
        self.batch_size = Histogram(
            "guardrail_batch_size",
            "Rows in each batched forward pass (continuous batching; one observation per decode step).",
            buckets=(1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64),
            registry=r,
        )
        self.generated_tokens = Counter(
            "guardrail_generated_tokens", "Completion tokens kept in answers.", registry=r
        )
        self.forward_passes = Counter(
            "guardrail_forward_passes", "Model forward passes (prefill counts one).", registry=r
        )
        self.rollbacks = Counter(
            "guardrail_rollbacks", "Rollbacks caused by a banned term of the word list.", ["list"], registry=r
        )
        self.escalations = Counter(
            "guardrail_escalations",
            "Terms of the word list escalated by the evasion guard (matched as a substring after a rollback).",
            ["list"],
            registry=r,
        )
        self.evasion_rollbacks = Counter(
            "guardrail_evasion_rollbacks",
            "Rollbacks caused by an escalated term's glued or _-joined form (a subset of guardrail_rollbacks_total).",
            ["list"],
            registry=r,
        )
        self.reprefills = Counter(
            "guardrail_reprefills",
            "Rollbacks that re-prefilled because the KV cache could not crop.",
            registry=r,
        )
        self.finishes = Counter(
            "guardrail_finishes",
            "Finished generations by finish_reason (stop, length, content_filter, error, cancelled).",
            ["reason"],
            registry=r,
        )
        self.generations_cancelled = Counter(
            "guardrail_generations_cancelled",
            "Generations cancelled because the client disconnected.",
            registry=r,
        )
        self.compile_duration = Histogram(
            "guardrail_compile_duration_seconds",
            "Time to compile an artefact (cache miss).",
            buckets=_COMPILE_BUCKETS,
            registry=r,
        )
        self.artefact_cache_lookups = Counter(
            "guardrail_artefact_cache_lookups",
            "Artefact lookups answered by memory, redis, disk or compile.",
            ["layer"],
            registry=r,
        )
        self.queue_depth = Gauge(
            "guardrail_queue_depth", "Generation requests waiting for the model worker.", registry=r
        )
        self.draining = Gauge(
            "guardrail_draining", "1 while the process drains (SIGTERM: admission stopped), else 0.", registry=r
        )
        self.generations_aborted = Counter(
            "guardrail_generations_aborted",
            "Generations ended with an error because the drain deadline passed (GUARDRAIL_DRAIN_TIMEOUT_S).",
            registry=r,
        )
        self.inflight_requests = Gauge(
            "guardrail_inflight_requests", "Requests being processed.", registry=r
        )
        self.redis_up: Gauge | None = (
            Gauge("guardrail_redis_up", "1 when the Redis store answers, 0 when it does not.", registry=r)
            if with_redis
            else None
        )
        self.store_resets = Counter(
            "guardrail_store_resets",
            "Times the word-list store was found to have lost its data (Redis restarted without persistence).",
            registry=r,
        )
        self.wordlist_version = Gauge(
            "guardrail_wordlist_version", "Current version number of each word list.", ["list"], registry=r
        )

        self.build_info = Gauge(
            "guardrail_build_info", "Always 1; the labels say which guardrail serves which model.",
            ["version", "model"], registry=r,
        )
        self.build_info.labels(guardrail.__version__, model).set(1)

    def set_redis_up(self, up: bool) -> None:
        """Record whether Redis answered (no-op with the embedded store)."""
        if self.redis_up is not None:
            self.redis_up.set(1 if up else 0)


class GlobalFamilies:
    """A collector that hands on the families of prometheus-client's process-wide registry whose names start
    with ``prefix``: the in-process vLLM engine records its own metrics (``vllm:num_requests_running``,
    ``vllm:kv_cache_usage_perc``, …; vllm/v1/metrics/loggers.py) there, and ``/metrics`` renders the app's
    registry, so they appear beside ours under their own names. The global registry's process/GC collectors
    are not handed on (the app's registry has its own)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def collect(self):
        from prometheus_client import REGISTRY

        return [family for family in REGISTRY.collect() if family.name.startswith(self.prefix)]

    def describe(self):
        return []  # unknown until vLLM has registered them: no name clash check at registration
