"""Telling whether a Redis transaction committed when its ``EXEC`` reply never came.

A reply that times out (or a connection that drops after ``EXEC`` was sent) leaves the outcome open: Redis
may have run the transaction, may run it later (a client paused by ``CLIENT PAUSE`` runs when the pause
ends), or never. Each write therefore carries a write id: its transaction ``WATCH``-es the marker key
``{ns}write:{id}`` and sets it to ``"committed"`` inside ``MULTI``. When the reply is lost, the writer sets
the marker to ``"aborted"`` with ``SET NX`` on a fresh connection. Redis runs commands one at a time, so
either the transaction ran first (the ``SET NX`` fails and the marker reads ``"committed"``) or the ``SET
NX`` did (the marker now exists, so a later ``EXEC`` of the transaction aborts: it watched the marker and
it changed). Either way the answer is final. Only when Redis does not answer the check either (for
:data:`SETTLE_ATTEMPTS` tries) is the outcome unknown, and the caller is told so
(:class:`~service.stores.store.WriteOutcomeUnknown`), never "nothing was changed".
"""

from __future__ import annotations

import time
import uuid
from collections import Counter

import redis
from redis.client import Pipeline
from redis.exceptions import RedisError, WatchError

from service.stores.store import StoreUnavailable, WriteOutcomeUnknown

#: Markers expire after an hour: a lost reply is settled within seconds, and markers must not pile up.
MARKER_TTL_S = 3600
COMMITTED = "committed"
_ABORTED = "aborted"
#: Tries of the check, and the wait between them (seconds, doubling): a Redis that restarts is back within a few.
SETTLE_ATTEMPTS = 6
_SETTLE_WAIT_S = 0.1


def new_marker(namespace: str) -> str:
    """The marker key of a new write: ``{namespace}write:{32 hex digits}``."""
    return f"{namespace}write:{uuid.uuid4().hex}"


def forget(client: redis.Redis, marker: str) -> None:
    """Delete the marker of a write whose reply came (best effort: it expires anyway)."""
    try:
        client.delete(marker)
    except RedisError:
        pass


def committed(client: redis.Redis, marker: str, what: str, tally: Counter[str] | None = None) -> bool:
    """Whether the transaction that watched and set ``marker`` committed (True) or never will (False).

    Args:
        client: the store's client (a fresh connection of its pool is used).
        marker: the write's marker key (:func:`new_marker`).
        what: the write, for the error message (``"word list 'pets'"``).
        tally: counts each outcome (``"committed"``, ``"not_committed"``, ``"unknown"``) when given.

    Raises:
        WriteOutcomeUnknown: Redis did not answer the check in :data:`SETTLE_ATTEMPTS` tries.
    """
    tally = tally if tally is not None else Counter()
    last: RedisError | None = None
    for attempt in range(SETTLE_ATTEMPTS):
        if attempt:
            time.sleep(_SETTLE_WAIT_S * 2 ** (attempt - 1))
        try:
            # Fenced when set here: the transaction, if it ever reaches EXEC, aborts.
            done = not client.set(marker, _ABORTED, nx=True, ex=MARKER_TTL_S) and client.get(marker) == COMMITTED
        except RedisError as exc:
            last = exc
            continue
        tally["committed" if done else "not_committed"] += 1
        return done
    tally["unknown"] += 1
    raise WriteOutcomeUnknown(f"the change of {what} was sent but Redis stopped answering before it could be told "
                              f"whether it committed ({last}); read it back to see") from last


def execute_marked(pipe: Pipeline, client: redis.Redis, marker: str, what: str, tally: Counter[str]) -> None:
    """Set ``marker`` to committed in ``pipe``'s transaction (which WATCHes it) and execute it, settling a lost
    reply: returns when the write committed (its marker then forgotten).

    Args:
        pipe: a pipeline in MULTI that watched ``marker``; client, marker, what, tally: as :func:`committed`.

    Raises:
        WatchError: it did not commit because a watched key changed (or the connection dropped while watching,
            which redis-py reports the same way): recompute and try again.
        StoreUnavailable: Redis did not answer the change; it was checked and did not commit.
        WriteOutcomeUnknown: as :func:`committed`.
    """
    pipe.set(marker, COMMITTED, ex=MARKER_TTL_S)
    try:
        pipe.execute()
    except RedisError as exc:
        # Sent, and the reply lost or the connection dropped: did it commit?
        if not committed(client, marker, what, tally):
            if isinstance(exc, WatchError):
                raise  # not committed: another writer, or the connection; try again
            raise StoreUnavailable(f"Redis did not answer the change ({exc}); it was checked and did not "
                                   "commit") from exc
    else:
        forget(client, marker)
