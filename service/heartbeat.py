"""Progress heartbeats of the worker threads, read by ``/healthz`` to notice a stuck worker.

A thread marks itself busy when it takes a job, beats on every event its decoder produces, and marks
itself idle when the job ends. A busy thread is stalled when it has had no beat for longer than a limit
*and no thread has beaten within that limit*: the decoder, the batch loop it waits on or the thread
itself no longer makes progress. The second condition keeps a healthy replica under load alive: a request
may wait inside the engine (a batch of one row for models with sliding-window layers, vLLM's scheduler)
behind other generations for longer than the limit while those make progress. Idle threads are never
stalled. Each call takes one lock and touches one dict entry, cheap enough for every token.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Stall:
    """A busy thread without progress: its name, and seconds since its last beat (or since it took its job)."""

    thread: str
    seconds: float


class Heartbeats:
    """Last progress time (``time.monotonic()``, seconds) of each busy thread, and of any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._busy: dict[str, float] = {}
        self._last_beat = float("-inf")

    def busy(self, thread: str) -> None:
        """``thread`` took a job: its progress clock starts now."""
        now = time.monotonic()
        with self._lock:
            self._busy[thread] = now

    def beat(self, thread: str) -> None:
        """``thread`` made progress (a decoder event)."""
        now = time.monotonic()
        with self._lock:
            self._last_beat = now
            if thread in self._busy:
                self._busy[thread] = now

    def idle(self, thread: str) -> None:
        """``thread`` finished its job; it cannot stall until it takes another."""
        with self._lock:
            self._busy.pop(thread, None)

    def stalled(self, limit_s: float, now: float | None = None) -> list[Stall]:
        """Busy threads whose last progress is more than ``limit_s`` seconds before ``now`` (default:
        ``time.monotonic()``), longest first; none while any thread beat within ``limit_s``."""
        now = time.monotonic() if now is None else now
        with self._lock:
            if now - self._last_beat <= limit_s:
                return []
            found = [Stall(name, now - at) for name, at in self._busy.items() if now - at > limit_s]
        return sorted(found, key=lambda s: -s.seconds)
