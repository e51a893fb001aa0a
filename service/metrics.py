"""Every Prometheus metric of the service, declared once (names and meanings: docs/metrics.md).

The request-level metrics are vLLM's (``vllm/v1/metrics/loggers.py``, ``PrometheusStatLogger``; vLLM docs,
"Metrics") under the ``guardrail_`` prefix: the same name after the prefix, the same meaning, the same bucket
boundaries and the same ``model_name`` label, so that a vLLM dashboard ports by changing ``vllm:`` to
``guardrail_`` (docs/metrics.md, "vLLM names"). The guard's own metrics (rollbacks, discarded tokens, guard
time per step, ``content_filter`` by list) have no vLLM counterpart.

Metrics live in a per-app ``CollectorRegistry`` so that two apps in one process (tests) count apart;
``/metrics`` renders exactly that registry plus the standard process/platform/GC collectors.
"""

from __future__ import annotations

from collections.abc import Callable

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

# HTTP request durations in seconds: sub-millisecond check requests up to multi-minute generations.
_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
# vLLM's boundaries (vllm/v1/metrics/loggers.py), so that quantiles of both services compare bucket for bucket.
# Time to first token (vLLM's reach 2560 s; waits of 63 s were measured here with a full queue on 2 cores).
VLLM_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                     20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
# Inter-token latency and per-request time per output token.
VLLM_TOKEN_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                              10.0, 20.0, 40.0, 80.0)
# End-to-end latency and queue time.
VLLM_REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                                120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
_COMPILE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
# Rollbacks of one choice: the default budget is 64 (GuardSession max_rollbacks); a request may raise it.
_ROLLBACK_BUCKETS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
# The guard's time per token: 2.84 us p50 on Gemma 3 (docs/benchmarks.md), up to a slow regex artefact.
_GUARD_STEP_BUCKETS = (1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 1e-2)
#: Label of ``guardrail_content_filter_finishes_total`` when no single list is to blame (every candidate token
#: was banned); list names cannot begin with ``_`` (service/routes/admin.py ``NAME_PATTERN``).
ALL_CANDIDATES_BANNED = "_all_candidates_banned"


def token_count_buckets(max_value: int = 10**6) -> tuple[int, ...]:
    """vLLM's 1-2-5 series (``build_1_2_5_buckets``: 1, 2, 5, 10, 20, 50, ...) up to ``max_value``.

    vLLM stops at the model's ``max_model_len``; the service stops at 10**6 tokens for every model, so that its
    buckets are known before the model loads (empty buckets above the context length cost nothing)."""
    buckets: list[int] = []
    scale = 1
    while True:
        for mantissa in (1, 2, 5):
            if mantissa * scale > max_value:
                return tuple(buckets)
            buckets.append(mantissa * scale)
        scale *= 10


class ServiceMetrics:
    """The service's metrics, registered in ``registry``.

    The vLLM-named metrics carry ``model_name`` (one per process: ``model``); their attributes here are the
    children of that label, so callers never pass it.

    Args:
        registry: where the metrics are registered (one registry per app).
        with_redis: declare ``guardrail_redis_up`` (absent when the embedded store is used).
        model: the served model (what requests name), the ``model_name`` label and a label of
            ``guardrail_build_info``.
    """

    def __init__(self, registry: CollectorRegistry | None = None, *, with_redis: bool, model: str = "") -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.model_name = model
        r = self.registry
        m = ["model_name"]
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
        self.inflight_requests = Gauge(
            "guardrail_inflight_requests",
            "HTTP requests being processed, /metrics and the health probes excluded.",
            registry=r,
        )

        # -- vLLM's names (vllm/v1/metrics/loggers.py) under guardrail_, with model_name --------------------
        self.num_requests_running = Gauge(
            "guardrail_num_requests_running", "Generation requests running on a worker thread.", m, registry=r
        ).labels(model)
        self.num_requests_waiting = Gauge(
            "guardrail_num_requests_waiting", "Generation requests admitted and waiting for a worker thread.", m,
            registry=r,
        ).labels(model)
        # By endpoint too: the route observes it (streaming requests only; a non-streamed answer's first
        # text is its last byte, guardrail_e2e_request_latency_seconds).
        self.time_to_first_token = Histogram(
            "guardrail_time_to_first_token_seconds",
            "Request start to the first released text (streaming).",
            ["endpoint", *m],
            buckets=VLLM_TTFT_BUCKETS,
            registry=r,
        )
        self.inter_token_latency = Histogram(
            "guardrail_inter_token_latency_seconds",
            "Time between two successive released text deltas of a choice.",
            m,
            buckets=VLLM_TOKEN_LATENCY_BUCKETS,
            registry=r,
        ).labels(model)
        self.request_time_per_output_token = Histogram(
            "guardrail_request_time_per_output_token_seconds",
            "Per choice: time after its first released text divided by the tokens kept after it.",
            m,
            buckets=VLLM_TOKEN_LATENCY_BUCKETS,
            registry=r,
        ).labels(model)
        self.e2e_request_latency = Histogram(
            "guardrail_e2e_request_latency_seconds",
            "Generation request admitted to its last choice finished (queue time included).",
            m,
            buckets=VLLM_REQUEST_LATENCY_BUCKETS,
            registry=r,
        ).labels(model)
        self.request_queue_time = Histogram(
            "guardrail_request_queue_time_seconds",
            "Time a generation request waited for the model worker.",
            m,
            buckets=VLLM_REQUEST_LATENCY_BUCKETS,
            registry=r,
        ).labels(model)
        self.prompt_tokens = Counter(
            "guardrail_prompt_tokens", "Prompt tokens of the generations (once per choice).", m, registry=r
        ).labels(model)
        self.generation_tokens = Counter(
            "guardrail_generation_tokens", "Completion tokens kept in answers (rolled-back tokens excluded).", m,
            registry=r,
        ).labels(model)
        self.request_prompt_tokens = Histogram(
            "guardrail_request_prompt_tokens", "Prompt tokens of each choice.", m,
            buckets=token_count_buckets(), registry=r,
        ).labels(model)
        self.request_generation_tokens = Histogram(
            "guardrail_request_generation_tokens", "Completion tokens kept in each choice.", m,
            buckets=token_count_buckets(), registry=r,
        ).labels(model)
        self.request_success = Counter(
            "guardrail_request_success",
            "Choices finished with an answer, by finish_reason (stop, length, content_filter).",
            [*m, "finished_reason"],
            registry=r,
        )
        for reason in ("stop", "length", "content_filter"):  # declared at 0, as vLLM does
            self.request_success.labels(model, reason)

        # -- the service's and the guard's own ------------------------------------------------------------
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
        self.forward_passes = Counter(
            "guardrail_forward_passes", "Model forward passes (prefill counts one).", registry=r
        )
        self.rollbacks = Counter(
            "guardrail_rollbacks", "Rollbacks caused by a banned term of the word list.", ["list"], registry=r
        )
        self.rollback_discarded_tokens = Counter(
            "guardrail_rollback_discarded_tokens",
            "Completion tokens dropped by rollbacks caused by a term of the word list (generated, never released).",
            ["list"],
            registry=r,
        )
        self.request_rollbacks = Histogram(
            "guardrail_request_rollbacks", "Rollbacks of each choice (same-position re-picks included).",
            buckets=_ROLLBACK_BUCKETS, registry=r,
        )
        self.guard_step = Histogram(
            "guardrail_guard_step_seconds",
            "Per choice: the guard's mean time to judge one token (GuardSession.accept, sampled 1 step in 16).",
            buckets=_GUARD_STEP_BUCKETS,
            registry=r,
        )
        self.content_filter_finishes = Counter(
            "guardrail_content_filter_finishes",
            "Choices finished with content_filter, by the word list that spent the rollback budget "
            f"({ALL_CANDIDATES_BANNED} when every candidate token was banned).",
            ["list"],
            registry=r,
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
        self.upstream_requests = Counter(
            "guardrail_upstream_requests",
            "Requests the gateway (engine=remote) sent to its upstream: one per answer, plus one per re-pick and "
            "continuation after a rollback.",
            registry=r,
        )
        self.upstream_banned_returned = Counter(
            "guardrail_upstream_banned_returned",
            "Tokens the upstream returned although banned for that request (never released; each a hit).",
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
        self.request_compiles = Counter(
            "guardrail_request_compiles",
            "Compiles of a request's own terms by outcome: ok, refused (a 400/413), over_time (past "
            "GUARDRAIL_REQUEST_COMPILE_TIME_S), refused_cached (the same refusal answered from memory, no compile), "
            "busy (503 compile_busy: the pool and its wait were full).",
            ["outcome"],
            registry=r,
        )
        self.cache_bytes = Gauge(
            "guardrail_cache_bytes", "Bytes a bounded in-process cache holds (as weighed when each entry was kept).",
            ["cache"], registry=r,
        )
        self.cache_limit_bytes = Gauge(
            "guardrail_cache_limit_bytes", "The bound of that cache in bytes (its GUARDRAIL_*_BYTES setting).",
            ["cache"], registry=r,
        )
        self.queue_depth = Gauge(
            "guardrail_queue_depth",
            "Generation requests waiting for the model worker (equals guardrail_num_requests_waiting).",
            registry=r,
        )
        self.draining = Gauge(
            "guardrail_draining", "1 while the process drains (SIGTERM: admission stopped), else 0.", registry=r
        )
        self.generations_aborted = Counter(
            "guardrail_generations_aborted",
            "Generations ended with an error because the drain deadline passed (GUARDRAIL_DRAIN_TIMEOUT_S).",
            registry=r,
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

    def watch_cache(self, cache: str, held: Callable[[], float], limit: float) -> None:
        """Export cache ``cache``'s bytes (read from ``held`` at each scrape) and its bound."""
        self.cache_bytes.labels(cache).set_function(held)
        self.cache_limit_bytes.labels(cache).set(limit)

    def set_worker_load(self, running: int, waiting: int) -> None:
        """Record the worker's generation requests: ``running`` on a thread, ``waiting`` in its queue."""
        self.num_requests_running.set(running)
        self.num_requests_waiting.set(waiting)
        self.queue_depth.set(waiting)

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
