"""The Redis word-list store, shared by replicas.

Keys (``ns`` = ``GUARDRAIL_REDIS_PREFIX``, default ``"guardrail:"``)::

    {ns}wordlist:{name}           hash: version, updated_at, body (word-list text format)
    {ns}wordlist-version:{name}   last version ever given to the name (kept after a delete)
    {ns}wordlist-history:{name}   list of JSON VersionInfo of the kept versions, newest first (kept after a delete)
    {ns}wordlist-bodies:{name}    hash: version -> body of each kept version
    {ns}wordlists                 hash: name -> current version (what replicas poll)
    {ns}audit                     list of JSON audit records, newest first, capped (LTRIM)
    {ns}wordlist-changes          pub/sub channel: {"list", "version"} after each change (a hint only)
    {ns}store-epoch               {"id", "floor"}: which life of the data this is (see below)
    {ns}write:{id}                a write's marker: "committed" / "aborted" (service/stores/write_outcome.py)

A write is optimistic: ``WATCH`` the list's keys and the epoch, read, compute, then ``MULTI``/``EXEC``
the new content, index entry, audit record and notification; a concurrent change of the same list
aborts the transaction and the write is retried against the new current version, after a random
wait that doubles with each attempt ("full jitter", AWS Architecture Blog, "Exponential Backoff And
Jitter", 2015), so that busy writers spread out instead of colliding again at once. A write that
still collides after :data:`MAX_WRITE_ATTEMPTS` raises :class:`WriteConflict` (busy, not down). A
transaction whose ``EXEC`` reply is lost is settled through its write marker: the answer is its success,
:class:`StoreUnavailable` (it did not commit) or :class:`~service.stores.store.WriteOutcomeUnknown`.

Epoch: a Redis without persistence that restarts comes back empty, and version counters would start
again at 1, so an old ``If-Match: "v1"`` would match again. Each store remembers the epoch id it
saw; when the epoch key is gone (or another replica replaced it), the data was lost: the store logs
an error, counts a reset (:attr:`RedisStore.resets`) and creates a new epoch whose ``floor`` is the
current time in milliseconds. Every version given afterwards is above the floor, so versions keep
growing and no ETag given before the loss matches again. (A Redis that loses its data while no
replica is running cannot be told from a new one: its epoch starts at floor 0.)
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable

import redis
from redis.exceptions import RedisError, WatchError

from guardrail.redis_client import DEFAULT_TIMEOUT_S, bounded_client
from guardrail.wordlists.wordlist import format_wordlist, parse_wordlist
from service.stores.store import (
    DEFAULT_HISTORY,
    AuditRecord,
    Compute,
    Precondition,
    PreconditionFailed,
    StoredWordList,
    StoreUnavailable,
    VersionInfo,
    WriteConflict,
    trimmed,
)
from service.stores.write_outcome import execute_marked, new_marker

log = logging.getLogger("guardrail.service.store")

MAX_WRITE_ATTEMPTS = 16
#: Backoff between attempts: a uniform wait in [0, min(cap, base * 2**attempt)] seconds.
_BACKOFF_BASE_S = 0.005
_BACKOFF_CAP_S = 0.25


class RedisStore:
    """Word lists in Redis.

    Args:
        url: ``redis://host:port/db``.
        namespace: prefix of every key and of the channel name (``"guardrail:"``; tests use their own).
        timeout_s: socket connect and read timeout, seconds (``GUARDRAIL_REDIS_TIMEOUT_S``); redis-py does
            not retry, so a Redis that does not answer fails each call within
            :func:`guardrail.redis_client.worst_case_stall_s` (2 × ``timeout_s``) and every method
            raises at the first call that fails.
        audit_max_records: audit records kept.
        history_max: versions of each list kept (the current one included).

    Attributes:
        epoch: id of the life of the data this store last saw (None before the first contact).
        floor: versions of this epoch are above it (0, or the time in ms when a loss was detected).
        resets: data losses detected by this store object.
        settled: writes whose EXEC reply was lost, by outcome (``committed``, ``not_committed``, ``unknown``).

    Raises:
        StoreUnavailable: from every method when Redis does not answer (message has the reason).
        WriteConflict: from ``write`` when the list kept changing during every attempt.
    """

    kind = "redis"

    def __init__(self, url: str, namespace: str = "guardrail:", timeout_s: float = DEFAULT_TIMEOUT_S,
                 audit_max_records: int = 10_000, history_max: int = DEFAULT_HISTORY) -> None:
        self.namespace = namespace
        self._redis = bounded_client(url, timeout_s, health_check_interval=30, decode_responses=True)
        self._index = f"{self.namespace}wordlists"
        self._audit = f"{self.namespace}audit"
        self.channel = f"{self.namespace}wordlist-changes"
        self._epoch_key = f"{self.namespace}store-epoch"
        self._audit_max = audit_max_records
        self._history_max = history_max
        self.epoch: str | None = None
        self.floor = 0
        self.resets = 0
        self.last_reset_at: float | None = None
        #: Writes whose reply was lost, by how the check settled them (service/stores/write_outcome.py).
        self.settled: Counter[str] = Counter()

    def _list_key(self, name: str) -> str:
        return f"{self.namespace}wordlist:{name}"

    def _counter_key(self, name: str) -> str:
        return f"{self.namespace}wordlist-version:{name}"

    def _history_key(self, name: str) -> str:
        return f"{self.namespace}wordlist-history:{name}"

    def _bodies_key(self, name: str) -> str:
        return f"{self.namespace}wordlist-bodies:{name}"

    # -- the epoch ---------------------------------------------------------------------------------
    def _adopt_epoch(self, raw: str | None) -> bool:
        """Take ``raw`` (the epoch key's value) as the current epoch; True when it is the one already known."""
        if raw is None:
            return False
        data = json.loads(raw)
        if data["id"] == self.epoch:
            return True
        if self.epoch is not None:
            self.resets += 1
            self.last_reset_at = time.time()
            log.error("the word-list store lost its data (Redis restarted without persistence?): changes made "
                      "since its last save are gone; versions continue above the new floor, so ETags given "
                      "before never match again", extra={"store": self.kind, "epoch": data["id"],
                                                          "floor": data["floor"]})
        self.epoch, self.floor = data["id"], int(data["floor"])
        return False

    def _sync_epoch(self) -> None:
        """Read the epoch, creating it when absent (floor 0 on first contact, the time in ms after a loss)."""
        raw = self._redis.get(self._epoch_key)
        if raw is None:
            floor = 0 if self.epoch is None else int(time.time() * 1000)
            self._redis.set(self._epoch_key, json.dumps({"id": uuid.uuid4().hex[:12], "floor": floor}), nx=True)
            raw = self._redis.get(self._epoch_key)  # ours, or the one another replica set first
        self._adopt_epoch(raw)

    # -- reading ----------------------------------------------------------------------------------
    def ping(self) -> None:
        try:
            self._redis.ping()
        except RedisError as exc:
            raise StoreUnavailable(f"Redis does not answer: {exc}") from exc

    def versions(self) -> dict[str, int]:
        """Current version of every list; also notices a loss of the data (see the module's doc)."""
        try:
            self._sync_epoch()
            return {name: int(v) for name, v in self._redis.hgetall(self._index).items()}
        except RedisError as exc:
            raise StoreUnavailable(f"Redis does not answer: {exc}") from exc

    @staticmethod
    def _decode(name: str, fields: dict[str, str]) -> StoredWordList | None:
        if not fields:
            return None
        wordlist = parse_wordlist(fields["body"], name, source=f"redis:{name}")
        return StoredWordList(wordlist, int(fields["version"]), float(fields["updated_at"]))

    def get(self, name: str) -> StoredWordList | None:
        try:
            return self._decode(name, self._redis.hgetall(self._list_key(name)))
        except RedisError as exc:
            raise StoreUnavailable(f"Redis does not answer: {exc}") from exc

    def has_history(self, name: str) -> bool:
        try:
            return bool(self._redis.exists(self._counter_key(name)))
        except RedisError as exc:
            raise StoreUnavailable(f"Redis does not answer: {exc}") from exc

    def audit(self, limit: int) -> list[AuditRecord]:
        try:
            rows = self._redis.lrange(self._audit, 0, max(limit, 1) - 1)
        except RedisError as exc:
            raise StoreUnavailable(f"Redis does not answer: {exc}") from exc
        return [AuditRecord(**json.loads(row)) for row in rows]

    def history(self, name: str) -> list[VersionInfo]:
        try:
            rows = self._redis.lrange(self._history_key(name), 0, -1)
            if not rows:  # written before versions were kept: the current one only
                current = self.get(name)
                return [VersionInfo.of(current)] if current is not None else []
        except RedisError as exc:
            raise StoreUnavailable(f"Redis does not answer: {exc}") from exc
        return [VersionInfo(**json.loads(row)) for row in rows]

    def get_version(self, name: str, version: int) -> StoredWordList | None:
        try:
            body = self._redis.hget(self._bodies_key(name), str(version))
            if body is None:
                current = self.get(name)
                return current if current is not None and current.version == version else None
            entry = next((e for e in self.history(name) if e.version == version), None)
        except RedisError as exc:
            raise StoreUnavailable(f"Redis does not answer: {exc}") from exc
        updated_at = entry.updated_at if entry is not None else 0.0
        return StoredWordList(parse_wordlist(body, name, source=f"redis:{name}@v{version}"), version, updated_at)

    # -- writing ----------------------------------------------------------------------------------
    def write(
        self, name: str, compute: Compute, precondition: Precondition | None, token_id: str | None
    ) -> StoredWordList | None:
        key, counter = self._list_key(name), self._counter_key(name)
        history_key, bodies_key = self._history_key(name), self._bodies_key(name)
        try:
            self._sync_epoch()
            for attempt in range(MAX_WRITE_ATTEMPTS):
                if attempt:
                    time.sleep(random.uniform(0, min(_BACKOFF_CAP_S, _BACKOFF_BASE_S * 2**attempt)))
                marker = new_marker(self.namespace)
                with self._redis.pipeline() as pipe:
                    try:
                        pipe.watch(key, counter, history_key, self._epoch_key, marker)
                        if not self._adopt_epoch(pipe.get(self._epoch_key)):
                            self._sync_epoch()  # lost (or replaced) since the last read: versions restart
                            continue            # above the new floor; read everything again
                        current = self._decode(name, pipe.hgetall(key))
                        if precondition is not None and not precondition.holds_for(current):
                            raise PreconditionFailed.of(name, current)
                        change = compute(current)
                        if change is None:
                            return current
                        version = max(int(pipe.get(counter) or 0), self.floor) + 1
                        now = time.time()
                        record = AuditRecord(now, change.action, name, version, token_id, change.added, change.removed)
                        # The kept versions, oldest first; a list written before versions were kept starts
                        # its history with its current version.
                        history = [VersionInfo(**json.loads(r)) for r in reversed(pipe.lrange(history_key, 0, -1))]
                        bodies: dict[str, str] = {}
                        if not history and current is not None:
                            history = [VersionInfo.of(current)]
                            bodies[str(current.version)] = format_wordlist(current.wordlist)
                        new = None
                        if change.wordlist is not None:
                            new = VersionInfo(version, now, len(change.wordlist.terms), len(change.wordlist.allow))
                            bodies[str(version)] = format_wordlist(change.wordlist)
                        kept, cut = trimmed(history, new, self._history_max)
                        pipe.multi()
                        if change.wordlist is None:
                            pipe.delete(key)
                            pipe.hdel(self._index, name)
                        else:
                            body = bodies[str(version)]
                            pipe.hset(key, mapping={"version": version, "updated_at": now, "body": body})
                            pipe.hset(self._index, name, version)
                        pipe.set(counter, version)
                        pipe.delete(history_key)
                        if kept:
                            pipe.rpush(history_key, *(json.dumps(e.to_dict()) for e in reversed(kept)))
                        if bodies:
                            pipe.hset(bodies_key, mapping=bodies)
                        if cut:
                            pipe.hdel(bodies_key, *(str(v) for v in cut))
                        pipe.lpush(self._audit, json.dumps(record.to_dict(), ensure_ascii=False))
                        pipe.ltrim(self._audit, 0, self._audit_max - 1)
                        pipe.publish(self.channel, json.dumps({"list": name, "version": version}))
                        execute_marked(pipe, self._redis, marker, f"word list {name!r}", self.settled)
                    except WatchError:
                        continue  # the list changed under us: recompute against the new version
                    if change.wordlist is None:
                        return None
                    return StoredWordList(change.wordlist, version, now)
        except RedisError as exc:
            raise StoreUnavailable(f"Redis does not answer: {exc}") from exc
        raise WriteConflict(f"word list {name!r} kept changing during {MAX_WRITE_ATTEMPTS} attempts of the update; "
                            "retry")

    # -- change notifications ---------------------------------------------------------------------
    def listen(self, on_hint: Callable[[], None], stop: threading.Event, retry_s: float = 1.0) -> None:
        """Call ``on_hint()`` on every change notification until ``stop`` is set (blocking; run it in a
        thread). Survives Redis outages: re-subscribes every ``retry_s`` seconds. Also calls
        ``on_hint()`` after each (re)subscription, since notifications sent meanwhile were lost.
        """
        while not stop.is_set():
            pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
            try:
                pubsub.subscribe(self.channel)
                on_hint()
                while not stop.is_set():
                    message = pubsub.get_message(timeout=0.5)
                    if message is not None and message.get("type") == "message":
                        on_hint()
            except RedisError as exc:
                log.debug("change notifications interrupted: %s", exc)
                stop.wait(retry_s)
            finally:
                try:
                    pubsub.close()
                except RedisError:
                    pass

    def close(self) -> None:
        self._redis.close()

    @property
    def client(self) -> redis.Redis:
        """The Redis client (its connection pool, timeouts and retries), shared by what lives beside the lists:
        tenant records and rate-limit counters (:mod:`service.tenants`)."""
        return self._redis
