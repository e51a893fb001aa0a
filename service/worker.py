"""The generation worker: threads that own the model, fed by a bounded queue.

The event loop never runs the model. A route turns a request into a :class:`GenerationRequest`,
:meth:`GenerationWorker.submit` admits it (or raises :class:`QueueFull`, answered 429) and returns a
:class:`Job`, whose :meth:`Job.events` async iterator yields the decoder's events as the worker thread
produces them. Setting ``job.cancel`` (the client went away) stops the decoder at its next step.
Every job ends: with its events, a :class:`GenerationRejected` (the decoder refused the parameters
before any work: a client error), a :class:`GenerationFailed` (the decoder raised, or produced nothing
for longer than the request's time limit), a :class:`ServerShuttingDown` (the drain deadline passed:
:meth:`GenerationWorker.abort_all`), or silently after a cancel.

Every busy thread publishes its progress in :attr:`GenerationWorker.heartbeats` (``/healthz`` reads it).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace

from guardrail.engines.remote.engine import RemoteUsage
from guardrail.guard.events import Event, Finish, Rollback, TextDelta
from guardrail.params import SamplingParams
from guardrail.wordlists.wordlist import WordList
from service.heartbeat import Heartbeats, Stall
from service.metrics import ALL_CANDIDATES_BANNED, ServiceMetrics
from service.settings import WATCHDOG_GRACE_S

log = logging.getLogger("guardrail.service.worker")

StreamFactory = Callable[[Sequence[int], tuple[WordList, ...], SamplingParams, threading.Event], Iterator[Event]]


class QueueFull(Exception):
    """No room in the queue; ``retry_after_s`` is a hint for the client."""

    def __init__(self, retry_after_s: int) -> None:
        super().__init__("the generation queue is full")
        self.retry_after_s = retry_after_s


class NotAdmitting(Exception):
    """The process is draining (SIGTERM): no new generation is admitted; ``retry_after_s`` is a hint."""

    def __init__(self, retry_after_s: int) -> None:
        super().__init__("the server is shutting down")
        self.retry_after_s = retry_after_s


class GenerationFailed(Exception):
    """The generation stopped with an error; the message is safe to show to the client."""


class ServerShuttingDown(GenerationFailed):
    """The generation was ended by the server's drain deadline (answered 503, not 500)."""


class GenerationRejected(Exception):
    """The decoder refused the request's parameters (its ``ValueError``, naming the field)."""


@dataclass(frozen=True)
class GenerationRequest:
    """What the worker needs to run one request.

    Attributes:
        prompt_ids: prompt token ids, shape ``(prompt_len,)``.
        wordlists: the lists to enforce (stored lists plus the request's own terms).
        params: sampling parameters; with ``n > 1`` choice ``i`` uses ``(seed + i) % 2**63`` when a seed is set.
        n: number of choices, generated one after another.
        log_fields: extra structured-log fields (never prompt text unless the debug flag allows it).
        log_text: also log the completions' text (``GUARDRAIL_DEBUG_LOG_PROMPTS``).
    """

    prompt_ids: Sequence[int]
    wordlists: tuple[WordList, ...]
    params: SamplingParams
    n: int = 1
    log_fields: dict[str, object] = field(default_factory=dict)
    log_text: bool = False


@dataclass(frozen=True)
class ChoiceEvent:
    """A decoder event of choice ``index``."""

    index: int
    event: Event


@dataclass(frozen=True)
class _End:
    error: str | None = None
    rejected: bool = False
    shutdown: bool = False


@dataclass(frozen=True)
class Load:
    """What the worker holds at one moment: ``running`` jobs on ``threads`` threads, ``waiting`` in a queue
    of ``max_queue`` places."""

    running: int
    waiting: int
    threads: int
    max_queue: int

    def saturated(self, queue_fraction: float) -> bool:
        """Whether the waiting jobs fill ``queue_fraction`` of the queue (rounded up, at least one job), or,
        without a queue, every thread is busy."""
        if self.max_queue == 0:
            return self.running >= self.threads
        return self.waiting >= max(1, math.ceil(queue_fraction * self.max_queue))


class Job:
    """One admitted request: the bridge between the worker thread and the route's coroutine."""

    def __init__(self, request: GenerationRequest, loop: asyncio.AbstractEventLoop, timeout_s: float) -> None:
        self.request = request
        self.cancel = threading.Event()
        self.running = threading.Event()
        self.enqueued_at = time.perf_counter()
        self._loop = loop
        self._events: asyncio.Queue[ChoiceEvent | _End] = asyncio.Queue()
        self._timeout_s = timeout_s

    def emit(self, item: ChoiceEvent | _End) -> None:
        """Hand an item to the route (called from the worker thread)."""
        try:
            self._loop.call_soon_threadsafe(self._events.put_nowait, item)
        except RuntimeError:  # the loop is closed: nobody listens any more
            self.cancel.set()

    async def events(self) -> AsyncIterator[ChoiceEvent]:
        """The job's events in order; returns after the last one (or a cancel).

        Raises:
            GenerationRejected: the decoder refused the parameters (before any output).
            ServerShuttingDown: the drain deadline ended the job (:meth:`GenerationWorker.abort_all`).
            GenerationFailed: the decoder raised, or the worker sent nothing for the request's time
                limit plus a grace period (a stuck worker never hangs the client).
        """
        while True:
            try:
                item = await asyncio.wait_for(self._events.get(), self._timeout_s + WATCHDOG_GRACE_S)
            except TimeoutError:
                if not self.running.is_set():
                    continue  # still queued behind other jobs: waiting is not a failure
                self.cancel.set()
                raise GenerationFailed("the generation produced nothing within its time limit") from None
            if isinstance(item, _End):
                if item.rejected:
                    raise GenerationRejected(item.error)
                if item.shutdown:
                    raise ServerShuttingDown(item.error)
                if item.error is not None:
                    raise GenerationFailed(item.error)
                return
            yield item


@dataclass
class Slot:
    """A place in the queue taken by :meth:`GenerationWorker.reserve`; ``open`` until filled or released."""

    open: bool = True


class GenerationWorker:
    """Runs jobs on ``threads`` threads that share one model.

    Args:
        make_stream: builds the decoder stream of one choice:
            ``make_stream(prompt_ids, wordlists, params, cancel) -> Iterator[Event]`` (looks up the
            artefact and runs ``StreamingDecoder.stream``); called on a worker thread.
        metrics: queue depth, finishes, cancellations, tokens, rollbacks.
        threads: generations run at once.
        max_queue: admitted jobs that may wait for a thread; one more is a :class:`QueueFull`.
        retry_after_s: the hint carried by :class:`QueueFull`.
    """

    def __init__(
        self,
        make_stream: StreamFactory,
        metrics: ServiceMetrics,
        threads: int = 1,
        max_queue: int = 16,
        retry_after_s: int = 1,
    ) -> None:
        self._make_stream = make_stream
        self._metrics = metrics
        self._threads_count = threads
        self._max_queue = max_queue
        self._capacity = threads + max_queue
        self._admitting = True
        self.heartbeats = Heartbeats()
        self._retry_after_s = retry_after_s
        self._queue: queue.Queue[Job | None] = queue.Queue()
        self._lock = threading.Lock()
        self._admitted = 0
        self._running = 0
        self._jobs: set[Job] = set()
        self._threads = [
            threading.Thread(target=self._loop, name=f"guardrail-worker-{i}", daemon=True) for i in range(threads)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Cancel every job and let the threads finish."""
        with self._lock:
            for job in self._jobs:
                job.cancel.set()
        for _ in self._threads:
            self._queue.put(None)
        for thread in self._threads:
            thread.join(timeout=timeout_s)

    @property
    def waiting(self) -> int:
        """Admitted jobs not yet running."""
        with self._lock:
            return self._admitted - self._running

    @property
    def admitted(self) -> int:
        """Jobs admitted and not yet ended (running or waiting)."""
        with self._lock:
            return self._admitted

    def load(self) -> Load:
        """Running and waiting jobs, and the room for them."""
        with self._lock:
            return Load(self._running, self._admitted - self._running, self._threads_count, self._max_queue)

    def alive(self) -> bool:
        """Whether every worker thread runs (false before :meth:`start` and after :meth:`stop`)."""
        return all(thread.is_alive() for thread in self._threads)

    def stalled(self, limit_s: float) -> list[Stall]:
        """Threads busy for more than ``limit_s`` seconds without a decoder event while no other thread had
        one (a stuck decoder, batch loop or thread; :meth:`Heartbeats.stalled`)."""
        return self.heartbeats.stalled(limit_s)

    def close_admission(self) -> None:
        """From now on :meth:`submit` raises :class:`NotAdmitting` (the drain began); admitted jobs go on."""
        with self._lock:
            self._admitting = False

    def abort_all(self, message: str) -> int:
        """End every admitted job now with :class:`ServerShuttingDown` (``message``), and stop its decoder
        at its next step; returns how many were ended. Events already handed to a job are read before
        the end, so a stream's released text stays whole."""
        with self._lock:
            jobs = list(self._jobs)
        for job in jobs:
            job.cancel.set()
            job.emit(_End(error=message, shutdown=True))
        return len(jobs)

    def submit(self, request: GenerationRequest, timeout_s: float) -> Job:
        """Admit a request (call from the event loop): :meth:`reserve` then :meth:`enqueue`.

        Raises:
            NotAdmitting: the process is draining (:meth:`close_admission`).
            QueueFull: every thread is busy and ``max_queue`` jobs already wait.
        """
        return self.enqueue(self.reserve(), request, timeout_s)

    def reserve(self) -> Slot:
        """Take a place in the queue for a job to come: what it costs the caller (its tokens per minute) is
        charged only once it holds one, so a full queue costs nothing. Give it back with :meth:`release`, or
        fill it with :meth:`enqueue`; meanwhile it counts as a waiting job.

        Raises:
            NotAdmitting: the process is draining (:meth:`close_admission`).
            QueueFull: every thread is busy and ``max_queue`` jobs already wait.
        """
        with self._lock:
            if not self._admitting:
                raise NotAdmitting(self._retry_after_s)
            if self._admitted >= self._capacity:
                raise QueueFull(self._retry_after_s)
            self._admitted += 1
            self._metrics.set_worker_load(self._running, self._admitted - self._running)
        return Slot()

    def release(self, slot: Slot) -> None:
        """Give back a place :meth:`reserve` took and no job filled (idempotent)."""
        with self._lock:
            if slot.open:
                slot.open = False
                self._admitted -= 1
                self._metrics.set_worker_load(self._running, self._admitted - self._running)

    def enqueue(self, slot: Slot, request: GenerationRequest, timeout_s: float) -> Job:
        """Queue a request in a place :meth:`reserve` took (call from the event loop); admitted even if the
        drain began since.

        Raises:
            ValueError: ``slot`` was released or filled already.
        """
        job = Job(request, asyncio.get_running_loop(), timeout_s)
        with self._lock:
            if not slot.open:
                raise ValueError("this queue slot was released or filled already")
            slot.open = False
            self._jobs.add(job)
        self._queue.put(job)
        return job

    def _loop(self) -> None:
        name = threading.current_thread().name
        while True:
            job = self._queue.get()
            if job is None:
                return
            with self._lock:
                self._running += 1
                self._metrics.set_worker_load(self._running, self._admitted - self._running)
            self.heartbeats.busy(name)
            try:
                self._run(job)
            finally:
                self.heartbeats.idle(name)
                with self._lock:
                    self._running -= 1
                    self._admitted -= 1
                    self._jobs.discard(job)
                    self._metrics.set_worker_load(self._running, self._admitted - self._running)

    def _run(self, job: Job) -> None:
        job.running.set()
        request = job.request
        started = time.perf_counter()
        self._metrics.request_queue_time.observe(started - job.enqueued_at)
        fields = {"queued_s": round(started - job.enqueued_at, 4), "n": request.n, **request.log_fields}
        cancelled = queued_cancel = job.cancel.is_set()  # the client left while the job waited
        finishes: list[Finish] = []
        try:
            for index in range(request.n):
                if cancelled:
                    break
                finish = self._run_choice(job, index, fields)
                if finish is None:  # rejected: the job has ended
                    return
                finishes.append(finish)
                cancelled = finish.reason == "cancelled"
        except Exception as exc:  # noqa: BLE001 - any failure must end the job, never hang it
            self._metrics.finishes.labels("error").inc()
            log.exception("generation failed", extra={**fields, "error_class": type(exc).__name__})
            job.emit(_End(error=f"generation failed ({type(exc).__name__})"))
            return
        fields.update(seconds=round(time.perf_counter() - started, 4),
                      finish_reasons=[f.reason for f in finishes],
                      completion_tokens=sum(f.usage.completion_tokens for f in finishes),
                      rollbacks=sum(f.usage.rollbacks for f in finishes))
        if request.log_text:
            fields["completions"] = [f.text for f in finishes]
        self._metrics.e2e_request_latency.observe(time.perf_counter() - job.enqueued_at)
        if cancelled:
            self._metrics.generations_cancelled.inc()
            if queued_cancel:  # no decoder ran, so no Finish(cancelled) was counted
                self._metrics.finishes.labels("cancelled").inc()
        log.info("generation cancelled" if cancelled else "generation finished", extra=fields)
        job.emit(_End())

    def _run_choice(self, job: Job, index: int, fields: dict[str, object]) -> Finish | None:
        """Decode choice ``index``, handing its events to the route; returns its Finish, or None when
        the decoder refused the parameters (the job is then ended with a rejection)."""
        request = job.request
        params = request.params
        if request.n > 1 and params.seed is not None:
            # Modulo: a seed near 2**63 must still give n valid, distinct seeds (the generator takes < 2**63).
            params = replace(params, seed=(params.seed + index) % 2**63)
        try:
            stream = self._make_stream(request.prompt_ids, request.wordlists, params, job.cancel)
            first = next(stream, None)
        except ValueError as exc:  # the decoder validates its arguments before any model work
            log.info("generation rejected", extra={**fields, "error_class": type(exc).__name__})
            job.emit(_End(error=str(exc), rejected=True))
            return None
        first_text_at: float | None = None
        last_text_at: float | None = None
        thread = threading.current_thread().name
        for event in itertools.chain([first] if first is not None else [], stream):
            self.heartbeats.beat(thread)
            if isinstance(event, TextDelta) and event.text:
                now = time.perf_counter()
                if last_text_at is None:
                    first_text_at = now
                else:  # vLLM's inter-token latency: between successive outputs of one request
                    self._metrics.inter_token_latency.observe(now - last_text_at)
                last_text_at = now
            self._record(event, first_text_at)
            if isinstance(event, Finish):
                if event.reason != "cancelled":  # after a cancel nobody reads the choice
                    job.emit(ChoiceEvent(index, event))
                return event
            job.emit(ChoiceEvent(index, event))
        raise RuntimeError("the decoder stream ended without a Finish event")

    def _record(self, event: Event, first_text_at: float | None) -> None:
        metrics = self._metrics
        if isinstance(event, Rollback):
            metrics.rollbacks.labels(event.list_name).inc()
            metrics.rollback_discarded_tokens.labels(event.list_name).inc(event.tokens_discarded)
            if event.escalated:
                metrics.escalations.labels(event.list_name).inc()
            if event.evasion:
                metrics.evasion_rollbacks.labels(event.list_name).inc()
        elif isinstance(event, Finish):
            usage = event.usage
            metrics.finishes.labels(event.reason).inc()
            metrics.prompt_tokens.inc(usage.prompt_tokens)
            metrics.prompt_cached_tokens.inc(usage.cached_tokens)
            metrics.draft_tokens.inc(usage.draft_tokens)
            metrics.accepted_draft_tokens.inc(usage.accepted_draft_tokens)
            if first_text_at is not None and usage.completion_tokens > 1:  # vLLM: decode time / (tokens - 1)
                metrics.request_time_per_output_token.observe(
                    (time.perf_counter() - first_text_at) / (usage.completion_tokens - 1))
            metrics.generation_tokens.inc(usage.completion_tokens)
            metrics.forward_passes.inc(usage.forward_passes)
            metrics.reprefills.inc(usage.reprefills)
            if isinstance(usage, RemoteUsage):
                metrics.upstream_requests.inc(usage.requests)
                metrics.upstream_banned_returned.inc(usage.banned_returned)
            if event.reason == "cancelled":  # nobody reads the choice: not a request vLLM would count as done
                return
            metrics.request_success.labels(metrics.model_name, event.reason).inc()
            metrics.request_prompt_tokens.observe(usage.prompt_tokens)
            metrics.request_generation_tokens.observe(usage.completion_tokens)
            metrics.request_rollbacks.observe(usage.rollbacks)
            if usage.guard_step_seconds is not None:
                metrics.guard_step.observe(usage.guard_step_seconds)
            if event.reason == "content_filter":
                metrics.content_filter_finishes.labels(event.filtered_by or ALL_CANDIDATES_BANNED).inc()
