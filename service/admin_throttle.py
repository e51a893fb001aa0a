"""Failed admin-token attempts, throttled per client address (``limits``' moving window, in memory).

A client address that presented a wrong admin token ``GUARDRAIL_ADMIN_FAILURES_PER_MINUTE`` times in the last
60 s gets 429 with ``Retry-After`` on every admin route until the oldest failure leaves the window, whatever
token it sends: guessing the token (at least 32 characters, :mod:`service.settings`) costs a minute per few
tries. Counted per process (each replica alone), in ``limits``' memory storage, whose entries expire after the
window, so the structure holds no more than the addresses that failed in the last minute. The address is the
TCP peer's (``request.client``): behind a proxy that does not pass the client's own, every client of that proxy
shares one count, which then throttles the proxy as a whole (docs/service.md, "Credentials").
"""

from __future__ import annotations

import math
import time

from limits import RateLimitItemPerMinute
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter


class AdminFailures:
    """Failed admin-token attempts per client address.

    Args:
        per_minute: failures allowed in any 60 s before the address is refused (≥ 1).
    """

    def __init__(self, per_minute: int) -> None:
        self._item = RateLimitItemPerMinute(per_minute)
        self._limiter = MovingWindowRateLimiter(MemoryStorage())

    def retry_after_s(self, address: str) -> int | None:
        """Seconds (≥ 1) until ``address`` may try again, or None when it may now."""
        if self._limiter.test(self._item, address):
            return None
        reset = self._limiter.get_window_stats(self._item, address).reset_time
        return max(1, math.ceil(reset - time.time()))

    def failed(self, address: str) -> None:
        """Count one failed attempt of ``address``."""
        self._limiter.hit(self._item, address)
