"""Load shedding, stuck-worker liveness and the drain, at thread level: the real :class:`GenerationWorker`,
:class:`Heartbeats`, :class:`Drain` and readiness rules, without a model.

The worker's stream factory here is a stand-in for the decoder (a generator that yields a text delta and
then blocks until the test releases it): a real decoder cannot be held busy without progress, or kept
running past a deadline, deterministically. The whole path with the real model, ``guardrail serve`` and
SIGTERM is tests/service/test_service_rollout.py.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest
from helpers.wait import wait_until

from guardrail.guard.events import Finish, TextDelta, Usage
from guardrail.params import SamplingParams
from service.drain import SHUTDOWN_MESSAGE, Drain
from service.heartbeat import Heartbeats
from service.metrics import ServiceMetrics
from service.routes.health import NOT_READY, readiness
from service.settings import Settings
from service.worker import (
    GenerationRequest,
    GenerationWorker,
    Load,
    NotAdmitting,
    QueueFull,
    ServerShuttingDown,
)

WAIT_S = 10  # a deadline for conditions that come within milliseconds, not a speed claim


class Gate:
    """Stand-in decoder streams (see the module docstring): each yields ``"a"``, then waits until
    :meth:`release` (or its cancel), then finishes."""

    def __init__(self) -> None:
        self.released = threading.Event()
        self.started = 0
        self._lock = threading.Lock()

    def release(self) -> None:
        self.released.set()

    def __call__(self, prompt_ids, wordlists, params, cancel: threading.Event) -> Iterator:
        with self._lock:
            self.started += 1
        yield TextDelta("a")
        while not (self.released.wait(0.01) or cancel.is_set()):
            pass
        reason = "cancelled" if cancel.is_set() and not self.released.is_set() else "stop"
        yield Finish(reason, "a", Usage(1, 1, 0, 1, 0, 0.0))


def request() -> GenerationRequest:
    return GenerationRequest([1, 2, 3], (), SamplingParams(max_tokens=4))


def make_worker(gate: Gate, threads: int = 2, max_queue: int = 2) -> GenerationWorker:
    worker = GenerationWorker(gate, ServiceMetrics(with_redis=False), threads=threads, max_queue=max_queue)
    worker.start()
    return worker


async def collect(job) -> tuple[list[str], BaseException | None]:
    texts: list[str] = []
    try:
        async for item in job.events():
            if isinstance(item.event, TextDelta):
                texts.append(item.event.text)
    except Exception as exc:  # noqa: BLE001 - the test looks at which one
        return texts, exc
    return texts, None


# -- heartbeats and liveness --------------------------------------------------------------------------------


def test_a_busy_thread_without_progress_is_stalled_and_an_idle_one_never_is():
    beats = Heartbeats()
    beats.busy("w0")
    beats.busy("w1")
    beats.beat("w1")
    beats.idle("w1")
    beats.beat("w2")  # a beat of a thread that holds no job does not make it busy
    assert beats.stalled(10.0) == []
    late = [s.thread for s in beats.stalled(10.0, now=time.monotonic() + 11.0)]
    assert late == ["w0"]


def test_a_silent_thread_is_not_stalled_while_another_makes_progress():
    """A request waiting inside the engine behind running generations is not stuck."""
    beats = Heartbeats()
    beats.busy("waiting")
    beats.busy("running")
    later = time.monotonic() + 100.0
    assert {s.thread for s in beats.stalled(10.0, now=later)} == {"waiting", "running"}
    beats.beat("running")
    assert beats.stalled(10.0, now=time.monotonic() + 5.0) == []
    # Once nothing progresses for the limit, both are stalled.
    assert {s.thread for s in beats.stalled(10.0, now=later)} == {"waiting", "running"}


def test_the_worker_reports_a_thread_blocked_in_its_decoder_and_forgets_it_once_it_finishes():
    gate = Gate()
    worker = make_worker(gate, threads=1)
    try:
        async def scenario() -> None:
            job = worker.submit(request(), timeout_s=60)
            # The stream yielded its first delta, then blocks: busy without progress from then on.
            wait_until(lambda: gate.started == 1, WAIT_S, "job started")
            wait_until(lambda: [s.thread for s in worker.stalled(0.0)] == ["guardrail-worker-0"], WAIT_S,
                       "the blocked thread reported stalled")
            assert worker.stalled(3600.0) == []  # under the limit: not stalled
            gate.release()
            texts, error = await collect(job)
            assert (texts, error) == (["a"], None)
            wait_until(lambda: worker.load().running == 0, WAIT_S, "thread idle")
            assert worker.stalled(0.0) == []

        asyncio.run(scenario())
    finally:
        gate.release()
        worker.stop()


def test_the_default_stall_limit_follows_the_request_timeout():
    assert Settings(request_timeout_s=50).worker_stall_limit_s == 80.0
    assert Settings(request_timeout_s=50, worker_stall_timeout_s=7).worker_stall_limit_s == 7.0


# -- readiness -----------------------------------------------------------------------------------------------


UP = {"kind": "redis", "up": True}
DOWN = {"kind": "redis", "up": False, "error": "Redis: connection refused"}


@pytest.mark.parametrize(("draining", "engine", "load", "fraction", "store", "expected"), [
    (False, None, Load(1, 0, 2, 4), 1.0, UP, "ready"),
    (False, None, Load(2, 3, 2, 4), 1.0, UP, "ready"),  # 3 of 4 places taken: under the threshold
    (False, None, Load(2, 4, 2, 4), 1.0, UP, "overloaded"),  # full: the next request gets 429
    (False, None, Load(2, 2, 2, 4), 0.5, UP, "overloaded"),
    (False, None, Load(2, 1, 2, 4), 0.1, UP, "overloaded"),  # ceil(0.4) = 1 waiting is enough
    (False, None, Load(1, 0, 2, 0), 1.0, UP, "ready"),  # no queue: one thread still free
    (False, None, Load(2, 0, 2, 0), 1.0, UP, "overloaded"),  # no queue, every thread busy
    (False, None, Load(0, 0, 2, 4), 1.0, DOWN, "degraded"),  # Redis down: served from memory, stays in
    (False, None, Load(2, 4, 2, 4), 1.0, DOWN, "overloaded"),
    (False, "the batch decoding loop is not running", Load(0, 0, 2, 4), 1.0, UP, "unavailable"),
    (True, "the batch decoding loop is not running", Load(2, 4, 2, 4), 1.0, DOWN, "draining"),
])
def test_readiness_matrix(draining, engine, load, fraction, store, expected):
    status, checks = readiness(draining=draining, drain_seconds=1.25, engine_problem=engine, load=load,
                               queue_fraction=fraction, store=store)
    assert status == expected
    assert (status in NOT_READY) == (expected not in {"ready", "degraded"})
    assert checks["worker"]["overloaded"] == load.saturated(fraction)
    assert checks["drain"] == ({"draining": True, "seconds": 1.2} if draining else {"draining": False})
    assert checks["model"]["engine"] == (engine or "up")
    assert checks["store"] is store


def test_a_worker_at_its_queue_threshold_is_saturated_and_refuses_beyond_capacity():
    gate = Gate()
    worker = make_worker(gate, threads=1, max_queue=2)
    try:
        async def scenario() -> None:
            jobs = [worker.submit(request(), timeout_s=60)]
            wait_until(lambda: gate.started == 1, WAIT_S, "first job running")
            assert not worker.load().saturated(0.5)
            jobs.append(worker.submit(request(), timeout_s=60))
            assert worker.load() == Load(running=1, waiting=1, threads=1, max_queue=2)
            assert worker.load().saturated(0.5) and not worker.load().saturated(1.0)
            jobs.append(worker.submit(request(), timeout_s=60))
            assert worker.load().saturated(1.0)
            with pytest.raises(QueueFull):
                worker.submit(request(), timeout_s=60)
            gate.release()
            assert [await collect(job) for job in jobs] == [(["a"], None)] * 3

        asyncio.run(scenario())
    finally:
        gate.release()
        worker.stop()


def test_a_reserved_place_counts_until_filled_or_released_and_a_released_one_cannot_be_filled():
    """What lets a route charge a caller's tokens only once the queue has admitted its job (issue 31 item 3)."""
    gate = Gate()
    worker = make_worker(gate, threads=1, max_queue=1)
    try:
        async def scenario() -> None:
            first, second = worker.reserve(), worker.reserve()
            assert worker.admitted == 2
            with pytest.raises(QueueFull):
                worker.reserve()
            worker.release(second)
            worker.release(second)  # idempotent: the place is given back once
            assert worker.admitted == 1
            with pytest.raises(ValueError):
                worker.enqueue(second, request(), timeout_s=60)
            job = worker.enqueue(first, request(), timeout_s=60)
            third = worker.reserve()  # the released place is free again
            with pytest.raises(QueueFull):
                worker.reserve()
            worker.release(third)
            gate.release()
            assert await collect(job) == (["a"], None)
            wait_until(lambda: worker.admitted == 0, WAIT_S, "the job's place given back")

        asyncio.run(scenario())
    finally:
        gate.release()
        worker.stop()


# -- drain ---------------------------------------------------------------------------------------------------


def test_a_drain_lets_jobs_finish_within_the_timeout_and_refuses_new_ones():
    gate = Gate()
    metrics = ServiceMetrics(with_redis=False)
    worker = GenerationWorker(gate, metrics, threads=2, max_queue=2)
    worker.start()
    drain = Drain(timeout_s=60, metrics=metrics)
    try:
        async def scenario() -> None:
            jobs = [worker.submit(request(), timeout_s=60) for _ in range(2)]
            collecting = [asyncio.ensure_future(collect(job)) for job in jobs]
            draining = asyncio.ensure_future(drain.run(worker))
            while not drain.draining:
                await asyncio.sleep(0)
            assert metrics.registry.get_sample_value("guardrail_draining") == 1
            with pytest.raises(NotAdmitting):
                worker.submit(request(), timeout_s=60)
            assert not draining.done()
            gate.release()  # the running jobs end normally: nothing to abort
            assert await draining == 0
            assert [await c for c in collecting] == [(["a"], None)] * 2

        asyncio.run(scenario())
    finally:
        gate.release()
        worker.stop()
    assert metrics.registry.get_sample_value("guardrail_generations_aborted_total") == 0


def test_at_the_drain_deadline_running_and_queued_jobs_end_with_a_shutdown_error():
    gate = Gate()
    metrics = ServiceMetrics(with_redis=False)
    worker = GenerationWorker(gate, metrics, threads=1, max_queue=2)
    worker.start()
    drain = Drain(timeout_s=0.2, metrics=metrics)  # the gate is never released: the deadline must end them
    try:
        async def scenario() -> None:
            running = worker.submit(request(), timeout_s=60)
            wait_until(lambda: gate.started == 1, WAIT_S, "first job running")
            queued = worker.submit(request(), timeout_s=60)
            results = asyncio.gather(collect(running), collect(queued))
            assert await drain.run(worker) == 2
            (texts_running, error_running), (texts_queued, error_queued) = await results
            # The running stream keeps what it released, then ends with the shutdown error; the queued one
            # never started.
            assert texts_running == ["a"] and isinstance(error_running, ServerShuttingDown)
            assert texts_queued == [] and isinstance(error_queued, ServerShuttingDown)
            assert str(error_running) == SHUTDOWN_MESSAGE
            assert worker.admitted == 0  # the decoders saw their cancel within the drain's grace

        asyncio.run(scenario())
    finally:
        gate.release()
        worker.stop()
    assert metrics.registry.get_sample_value("guardrail_generations_aborted_total") == 2
    assert gate.started == 1  # the queued job was cancelled before its decoder started
