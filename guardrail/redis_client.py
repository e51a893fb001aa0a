"""Redis clients whose stalls are bounded: explicit timeouts, no retries inside redis-py.

redis-py's default policy retries a failed command 10 times with exponential backoff (capped at 1 s),
and retries the socket connect inside each of those attempts as well: against a Redis that accepts
connections but never answers, one ``GET`` with a 0.2 s timeout made 121 connection attempts and
stalled for about 70 s (redis-py 8.1). The clients made here pass ``retry=Retry(NoBackoff(), 0)``
instead, so every call makes one attempt and fails at the first wait that runs out:

- connecting waits at most ``timeout_s`` (``socket_connect_timeout``);
- each reply (the connection handshake's, then the command's) waits at most ``timeout_s``
  (``socket_timeout``).

A Redis that does not answer at all (stopped, unreachable, or hung) therefore stalls one call at most
:func:`worst_case_stall_s` = 2 × ``timeout_s`` (connect, then the first reply that never comes); a
stopped one fails at once (connection refused). A pooled connection the server closed (a restart) is
noticed and replaced by redis-py's pool before the command is sent, so no retry is needed for it.
Callers decide what a failure means: the word-list store raises ``StoreUnavailable`` (the catalog
polls again, an admin write answers 503), the artefact cache treats it as a miss.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import redis

#: Socket connect and read timeout when the caller gives none, seconds (the service's
#: ``GUARDRAIL_REDIS_TIMEOUT_S`` default).
DEFAULT_TIMEOUT_S = 0.5
#: Waits one call can make against a Redis that does not answer: the connect and the first reply.
WAITS_PER_CALL = 2


def worst_case_stall_s(timeout_s: float) -> float:
    """Longest a single Redis call blocks when Redis does not answer, seconds: connect plus one reply,
    each bounded by ``timeout_s``, and no retry (see the module's doc)."""
    return WAITS_PER_CALL * timeout_s


def bounded_client(url: str, timeout_s: float = DEFAULT_TIMEOUT_S, **kwargs: Any) -> redis.Redis:
    """A ``redis.Redis`` for ``url`` with connect and read timeouts of ``timeout_s`` seconds and no retry.

    Args:
        url: ``redis://host:port/db`` (or ``rediss://``, ``unix://``).
        timeout_s: socket connect timeout and socket read timeout, seconds (> 0).
        kwargs: more ``redis.Redis`` options (``decode_responses``, ``health_check_interval``);
            ``retry`` and the timeouts cannot be overridden.

    Raises:
        ValueError: ``timeout_s`` is not positive, or the URL is not a Redis URL.
        ImportError: the ``redis`` package is not installed (``pip install 'guardrail[redis]'``).
    """
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0 seconds, got {timeout_s}")
    return redis.Redis.from_url(
        url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, retry=Retry(NoBackoff(), 0), **kwargs
    )
