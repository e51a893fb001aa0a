"""Graceful drain of one service process (SIGTERM under ``guardrail serve``; docs/service.md, "Health,
readiness and drain").

:meth:`Drain.run` stops admission (new generations get 503 with ``Retry-After``, ``/readyz`` answers 503),
lets the admitted generations finish for up to ``timeout_s``, then ends the rest: a stream gets an
``error`` event then ``[DONE]``, a non-streaming request a 503 JSON error. Only then does the HTTP server
stop (``service/cli/serve.py``): uvicorn's own shutdown closes the listening socket at once and waits
for open connections without a deadline, so it must start after the drain, not instead of it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from types import FrameType

import uvicorn
from fastapi import FastAPI

from service.metrics import ServiceMetrics
from service.worker import GenerationWorker

log = logging.getLogger("guardrail.service.drain")

#: What a generation ended by the drain deadline tells its client.
SHUTDOWN_MESSAGE = "The server is shutting down: the generation was ended. Retry the request."
# How often the drain looks at the worker, seconds: the drain ends at most this late after the last job.
_POLL_S = 0.05
# After the deadline: how long the aborted jobs may take to hand their error to their routes, seconds.
_ABORT_GRACE_S = 5.0
#: After the drain: how long uvicorn waits for open connections to finish writing before it cancels
#: them (its ``timeout_graceful_shutdown``), seconds. The streams have their last event by then.
CLOSE_TIMEOUT_S = 10


class Drain:
    """The drain state of one process, shared by the routes (``app.state.drain``) and the server.

    Args:
        timeout_s: how long admitted generations may go on once the drain began, seconds.
        metrics: sets ``guardrail_draining`` and counts ``guardrail_generations_aborted_total``.
    """

    def __init__(self, timeout_s: float, metrics: ServiceMetrics) -> None:
        self.timeout_s = timeout_s
        self._metrics = metrics
        self._started_at: float | None = None  # time.monotonic()

    @property
    def draining(self) -> bool:
        """Whether the drain began (it never ends: the process exits after it)."""
        return self._started_at is not None

    def seconds(self) -> float:
        """Seconds since the drain began (0 before)."""
        return 0.0 if self._started_at is None else time.monotonic() - self._started_at

    async def run(self, worker: GenerationWorker) -> int:
        """Drain ``worker``: stop admission, wait for its jobs up to ``timeout_s``, end the rest with an
        error. Returns how many generations were ended (0 when all finished in time). Call once, on the
        event loop."""
        self._started_at = time.monotonic()
        self._metrics.draining.set(1)
        worker.close_admission()
        log.info("drain started", extra={"admitted": worker.admitted, "timeout_s": self.timeout_s})
        deadline = self._started_at + self.timeout_s
        while worker.admitted and time.monotonic() < deadline:
            await asyncio.sleep(_POLL_S)
        aborted = worker.abort_all(SHUTDOWN_MESSAGE) if worker.admitted else 0
        if aborted:
            self._metrics.generations_aborted.inc(aborted)
            log.warning("drain deadline passed: generations ended", extra={"aborted": aborted})
            # Give the worker threads a moment to notice their cancel, so that the engine is idle before
            # the lifespan stops it; the routes already hold their error.
            grace_until = time.monotonic() + _ABORT_GRACE_S
            while worker.admitted and time.monotonic() < grace_until:
                await asyncio.sleep(_POLL_S)
        log.info("drain finished", extra={"seconds": round(self.seconds(), 3), "aborted": aborted})
        return aborted


class DrainingServer(uvicorn.Server):
    """uvicorn's server with the app's :class:`Drain` before its own shutdown.

    The first SIGTERM or SIGINT after start-up runs ``app.state.drain`` while the listening socket stays
    open (``/readyz`` answers 503 ``draining``, new generations 503 with ``Retry-After``, running streams
    go on); when the drain is over, uvicorn's shutdown runs as for the signal: it closes the socket,
    waits for the open connections (at most ``timeout_graceful_shutdown``), runs the lifespan shutdown and
    re-raises the signal. A second signal during the drain is uvicorn's own: stop now.

    Args:
        config: uvicorn's configuration; its app must be ``app``.
        app: the application (from :func:`service.app.create_app`).
    """

    def __init__(self, config: uvicorn.Config, app: FastAPI) -> None:
        super().__init__(config)
        self._app = app
        self._drain_signal: int | None = None
        self._drain_task: asyncio.Task[None] | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        started = getattr(self._app.state, "runtime", None) is not None and self.started
        if started and self._drain_signal is None and not self.should_exit:
            # A signal handler may run between any two bytecodes of the event loop: only set a flag here;
            # the main loop's next tick (every 0.1 s) starts the drain.
            self._drain_signal = sig
            return
        super().handle_exit(sig, frame)

    async def on_tick(self, counter: int) -> bool:
        if self._drain_signal is not None and self._drain_task is None:
            self._drain_task = asyncio.create_task(self._drain(self._drain_signal))
        return await super().on_tick(counter)

    async def _drain(self, sig: int) -> None:
        try:
            await self._app.state.drain.run(self._app.state.runtime.worker)
        except Exception:  # noqa: BLE001 - a failed drain must still shut down
            log.exception("drain failed")
        finally:
            super().handle_exit(sig, None)
