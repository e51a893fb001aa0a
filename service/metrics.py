"""Every Prometheus metric of the service, declared once (names and meanings: docs/metrics.md).

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

# Latency buckets in seconds: sub-millisecond check requests up to multi-minute generations.
_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
_TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_COMPILE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class ServiceMetrics:
    """The service's metrics, registered in ``registry``.

    Args:
        registry: where the metrics are registered (one registry per app).
        with_redis: declare ``guardrail_redis_up`` (absent when the embedded store is used).
    """

    def __init__(self, registry: CollectorRegistry | None = None, *, with_redis: bool) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)

        self.requests = Counter(
            "guardrail_requests", "HTTP requests answered.", ["endpoint", "status"], registry=r
        )
        self.request_duration = Histogram(
            "guardrail_request_duration_seconds",
            "Wall time from request to last byte.",
            ["endpoint"],
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
        self.banned_term_hits = Counter(
            "guardrail_banned_term_hits",
            "Banned-term matches caught (rollback or token mask).",
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
        self.inflight_requests = Gauge(
            "guardrail_inflight_requests", "Requests being processed.", registry=r
        )
        self.redis_up: Gauge | None = (
            Gauge("guardrail_redis_up", "1 when the Redis store answers, 0 when it does not.", registry=r)
            if with_redis
            else None
        )
        self.wordlist_version = Gauge(
            "guardrail_wordlist_version", "Current version number of each word list.", ["list"], registry=r
        )

    def set_redis_up(self, up: bool) -> None:
        """Record whether Redis answered (no-op with the embedded store)."""
        if self.redis_up is not None:
            self.redis_up.set(1 if up else 0)
