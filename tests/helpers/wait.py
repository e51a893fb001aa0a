"""Waiting for a condition: poll it until a deadline, never sleep a fixed time and hope."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import redis


def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str,
               alive: Callable[[], bool] = lambda: True, interval_s: float = 0.1) -> None:
    """Poll ``predicate`` until it holds; connection errors count as 'not yet'.

    ``timeout_s`` only bounds the wait (a deadline for a condition that does not come), it is not a
    speed claim. ``alive`` is checked first on every round: a process that died fails at once instead
    of at the deadline.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive():
            raise AssertionError(f"{what}: the server died")
        try:
            if predicate():
                return
        except (httpx.HTTPError, OSError, redis.RedisError):
            pass
        time.sleep(interval_s)
    raise AssertionError(f"{what}: not within {timeout_s} s")
