"""Per-tenant rate limits (requests and tokens per minute) with the ``limits`` library.

With Redis the counters live in Redis (keys ``{GUARDRAIL_REDIS_PREFIX}ratelimit:…``), so a limit holds across
replicas; without it, in this process's memory. Requests are counted in a moving window (exact: a request is
refused while ``requests_per_minute`` requests fall in the last 60 s); tokens in a sliding window counter
(``limits``' approximation of a moving window from two fixed windows, constant memory whatever the token
count, where a moving window would keep one entry per token). A refused hit consumes nothing.

When Redis does not answer, each replica counts in its own memory until it does again (the limits then hold
per replica, not across them): an outage of the store must not stop the service (docs/service.md).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

import redis
from limits import RateLimitItemPerMinute
from limits.storage import MemoryStorage, RedisStorage
from limits.strategies import MovingWindowRateLimiter, SlidingWindowCounterRateLimiter
from redis.exceptions import RedisError

log = logging.getLogger("guardrail.service.tenants")


_WINDOW_S = 60


class _Limiters:
    def __init__(self, storage: MemoryStorage | RedisStorage) -> None:
        self.storage = storage
        self.requests = MovingWindowRateLimiter(storage)
        self.tokens = SlidingWindowCounterRateLimiter(storage)


def _tokens_wait_s(storage: MemoryStorage | RedisStorage, item: RateLimitItemPerMinute, key: str, cost: int) -> float:
    """Seconds until ``cost`` tokens fit the sliding window counter of ``key``.

    The counter weighs the previous minute's count by the share of it still inside the last 60 s and adds the
    current minute's (``limits`` docs, "Sliding Window Counter"): ``prev * prev_ttl / 60 + cur``, where
    ``prev_ttl`` is what is left of the current minute. ``limits``' own ``reset_time`` is the time until one
    unit frees up, too early for a request that needs ``cost``.
    """
    limit = item.amount
    prev, prev_ttl, cur, cur_ttl = storage.get_sliding_window(item.key_for(key), _WINDOW_S)
    if cur + cost <= limit:  # only the previous minute's weight is in the way: wait for it to decay enough
        return prev_ttl - (limit - cost - cur) * _WINDOW_S / prev if prev else 0.0
    left_in_minute = cur_ttl - _WINDOW_S  # then this minute's count becomes the previous one and decays
    return left_in_minute + _WINDOW_S * (1 - (limit - cost) / cur)


class RateLimits:
    """Requests and tokens per minute, by tenant.

    Args:
        client: the word-list store's Redis client (its connection pool, timeouts and retries), or None
            for in-memory counters.
        namespace: ``GUARDRAIL_REDIS_PREFIX``.
        redis_up: whether the store answered at its last poll; while it did not, counting goes to memory
            at once instead of waiting for a Redis timeout on every request.
    """

    def __init__(self, client: redis.Redis | None, namespace: str = "guardrail:",
                 redis_up: Callable[[], bool] = lambda: True) -> None:
        self._memory = _Limiters(MemoryStorage())
        self._shared: _Limiters | None = None
        if client is not None:
            # The URI is only read for its scheme when a connection pool is given.
            storage = RedisStorage("redis://", connection_pool=client.connection_pool,
                                   key_prefix=f"{namespace}ratelimit")
            self._shared = _Limiters(storage)
        self._redis_up = redis_up

    def _limiters(self) -> _Limiters:
        return self._shared if self._shared is not None and self._redis_up() else self._memory

    @staticmethod
    def _requests(limiters: _Limiters, item: RateLimitItemPerMinute, key: str, cost: int) -> float | None:
        if limiters.requests.hit(item, key):
            return None
        return limiters.requests.get_window_stats(item, key).reset_time - time.time()

    @staticmethod
    def _tokens(limiters: _Limiters, item: RateLimitItemPerMinute, key: str, cost: int) -> float | None:
        if limiters.tokens.hit(item, key, cost=cost):
            return None
        return _tokens_wait_s(limiters.storage, item, key, cost)

    def _hit(self, attempt: Callable[[_Limiters, RateLimitItemPerMinute, str, int], float | None],
             per_minute: int, key: str, cost: int) -> int | None:
        item = RateLimitItemPerMinute(per_minute)
        try:
            wait = attempt(self._limiters(), item, key, cost)
        except RedisError as exc:
            log.warning("rate limits counted in memory: Redis does not answer", extra={"error": str(exc)})
            wait = attempt(self._memory, item, key, cost)
        return None if wait is None else max(1, math.ceil(wait))

    def hit_request(self, key: str, per_minute: int) -> int | None:
        """Count one request of ``key``; None when admitted, else the seconds until one may pass (≥ 1)."""
        return self._hit(self._requests, per_minute, key, 1)

    def hit_tokens(self, key: str, per_minute: int, tokens: int) -> int | None:
        """Count ``tokens`` of ``key`` (at most ``per_minute``); None when admitted, else the seconds until
        they fit (≥ 1). A refused request consumes nothing."""
        return self._hit(self._tokens, per_minute, key, tokens)
