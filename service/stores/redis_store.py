"""The Redis word-list store, shared by replicas.

Keys (``ns`` = ``GUARDRAIL_REDIS_PREFIX``, default ``"guardrail:"``)::

    {ns}wordlist:{name}           hash: version, updated_at, body (word-list text format)
    {ns}wordlist-version:{name}   last version ever given to the name (kept after a delete)
    {ns}wordlists                 hash: name -> current version (what replicas poll)
    {ns}audit                     list of JSON audit records, newest first, capped (LTRIM)
    {ns}wordlist-changes          pub/sub channel: {"list", "version"} after each change (a hint only)

A write is optimistic: ``WATCH`` the list's two keys, read, compute, then ``MULTI``/``EXEC`` the new
content, index entry, audit record and notification; a concurrent change of the same list aborts
the transaction and the write is retried against the new current version.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable

import redis
from redis.exceptions import RedisError, WatchError

from guardrail.wordlists.wordlist import format_wordlist, parse_wordlist
from service.stores.store import (
    AuditRecord,
    Compute,
    Precondition,
    PreconditionFailed,
    StoredWordList,
    StoreUnavailable,
)

log = logging.getLogger("guardrail.service.store")

_MAX_WRITE_ATTEMPTS = 16


class RedisStore:
    """Word lists in Redis.

    Args:
        url: ``redis://host:port/db``.
        namespace: prefix of every key and of the channel name (``"guardrail:"``; tests use their own).
        timeout_s: socket connect/read timeout, seconds; a Redis that does not answer within it
            counts as down (so a dead Redis never stalls a request for long).
        audit_max_records: audit records kept.

    Raises:
        StoreUnavailable: from every method when Redis does not answer (message has the reason).
    """

    kind = "redis"

    def __init__(self, url: str, namespace: str = "guardrail:", timeout_s: float = 0.5,
                 audit_max_records: int = 10_000) -> None:
        self.namespace = namespace
        self._redis = redis.Redis.from_url(
            url,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            health_check_interval=30,
            decode_responses=True,
        )
        self._index = f"{self.namespace}wordlists"
        self._audit = f"{self.namespace}audit"
        self.channel = f"{self.namespace}wordlist-changes"
        self._audit_max = audit_max_records

    def _list_key(self, name: str) -> str:
        return f"{self.namespace}wordlist:{name}"

    def _counter_key(self, name: str) -> str:
        return f"{self.namespace}wordlist-version:{name}"

    # -- reading ----------------------------------------------------------------------------------
    def ping(self) -> None:
        try:
            self._redis.ping()
        except RedisError as exc:
            raise StoreUnavailable(f"Redis does not answer: {exc}") from exc

    def versions(self) -> dict[str, int]:
        try:
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

    # -- writing ----------------------------------------------------------------------------------
    def write(
        self, name: str, compute: Compute, precondition: Precondition | None, token_id: str | None
    ) -> StoredWordList | None:
        key, counter = self._list_key(name), self._counter_key(name)
        try:
            for _ in range(_MAX_WRITE_ATTEMPTS):
                with self._redis.pipeline() as pipe:
                    try:
                        pipe.watch(key, counter)
                        current = self._decode(name, pipe.hgetall(key))
                        if precondition is not None and not precondition.holds(current.version if current else None):
                            raise PreconditionFailed(name, current.version if current else None)
                        change = compute(current)
                        if change is None:
                            return current
                        version = int(pipe.get(counter) or 0) + 1
                        now = time.time()
                        record = AuditRecord(now, change.action, name, version, token_id, change.added, change.removed)
                        pipe.multi()
                        if change.wordlist is None:
                            pipe.delete(key)
                            pipe.hdel(self._index, name)
                        else:
                            body = format_wordlist(change.wordlist)
                            pipe.hset(key, mapping={"version": version, "updated_at": now, "body": body})
                            pipe.hset(self._index, name, version)
                        pipe.set(counter, version)
                        pipe.lpush(self._audit, json.dumps(record.to_dict(), ensure_ascii=False))
                        pipe.ltrim(self._audit, 0, self._audit_max - 1)
                        pipe.publish(self.channel, json.dumps({"list": name, "version": version}))
                        pipe.execute()
                    except WatchError:
                        continue  # the list changed under us: recompute against the new version
                    if change.wordlist is None:
                        return None
                    return StoredWordList(change.wordlist, version, now)
        except RedisError as exc:
            raise StoreUnavailable(f"Redis does not answer: {exc}") from exc
        raise StoreUnavailable(f"word list {name!r} changed {_MAX_WRITE_ATTEMPTS} times during the update")

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
