"""Tenant records, kept in the word-list store's backend: Redis when the service runs with Redis (shared by
every replica), else files beside the embedded store's.

A record holds the tenant's name, policy and the SHA-256 of its live key (None once revoked), never a key;
after a rotate also the SHA-256 of the previous key, which stays valid until the new key is first used
(docs/service.md "Writes and their outcome": a rotate whose answer was lost never locks the tenant out).
Redis keys (``ns`` = ``GUARDRAIL_REDIS_PREFIX``)::

    {ns}tenant:{name}          JSON record
    {ns}tenant-key:{sha256}    name of the tenant whose live (or previous) key has this hash (deleted when retired)
    {ns}tenants                hash: name -> version
    {ns}tenant-audit           list of JSON audit records, newest first, capped (LTRIM)

A change is one optimistic ``WATCH``/``MULTI`` transaction (record, key index, audit record, write marker),
retried when another writer changed the same tenant meanwhile, so a retired or revoked key is gone for every
replica the moment the change is acknowledged: requests look their key up in Redis each time (no cache). A
transaction whose reply is lost is settled by its write marker (:mod:`service.stores.write_outcome`).

Embedded (no Redis): ``<data_dir>/tenants.json`` replaced atomically on every change
(:func:`guardrail.atomic_file.write_json_atomically`, as the word-list store's index) and
``<data_dir>/tenant-audit.jsonl`` (:class:`service.stores.audit_log.JsonLinesLog`, as the word-list store's
audit); one process per data directory, as for the lists.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal, Protocol

import redis
from redis.exceptions import RedisError, WatchError

from guardrail.atomic_file import read_json, write_json_atomically
from service.stores.audit_log import JsonLinesLog
from service.stores.store import StoreUnavailable, WriteConflict, content_digest, entity_tag
from service.stores.write_outcome import execute_marked, new_marker
from service.tenants.keys import key_id
from service.tenants.policy import TenantPolicy

log = logging.getLogger("guardrail.service.tenants")

TenantAction = Literal["create", "update", "rotate", "retire", "revoke", "delete"]
_MAX_WRITE_ATTEMPTS = 16


@dataclass(frozen=True)
class TenantRecord:
    """A tenant as stored.

    Attributes:
        name: the tenant's name (the metrics label and log field).
        policy: what its requests may do.
        key_hash: SHA-256 (hex) of its live API key; None after a revoke.
        version: 1 when created, +1 per change.
        created_at / updated_at: Unix time, seconds.
        previous_key_hash: SHA-256 of the key before the last rotate while it is still valid (until
            ``key_hash`` is first used, or a revoke); None otherwise.
    """

    name: str
    policy: TenantPolicy
    key_hash: str | None
    version: int = 0
    created_at: float = 0.0
    updated_at: float = 0.0
    previous_key_hash: str | None = None

    @property
    def key_id(self) -> str | None:
        return key_id(self.key_hash) if self.key_hash else None

    @property
    def previous_key_id(self) -> str | None:
        return key_id(self.previous_key_hash) if self.previous_key_hash else None

    @property
    def live_hashes(self) -> frozenset[str]:
        """The SHA-256 of every key that authenticates as this tenant now (zero, one or two)."""
        return frozenset(h for h in (self.key_hash, self.previous_key_hash) if h)

    @property
    def etag(self) -> str:
        """``"v<version>-<digest>"``: the digest is of the policy and key hashes, so that a version number given
        twice (a Redis that lost part of its data) never names two contents."""
        content = json.dumps([self.policy.model_dump(mode="json", exclude_defaults=True), self.key_hash,
                              self.previous_key_hash], sort_keys=True)
        return entity_tag(self.version, content_digest(content))

    def to_json(self) -> str:
        data = {**asdict(self), "policy": self.policy.model_dump(exclude_defaults=True)}
        return json.dumps(data, ensure_ascii=False, sort_keys=True)

    @classmethod
    def from_json(cls, raw: str | bytes) -> TenantRecord:
        data = json.loads(raw)
        return cls(**{**data, "policy": TenantPolicy.model_validate(data["policy"])})


@dataclass(frozen=True)
class TenantAuditRecord:
    """One change of one tenant: when (Unix seconds), what, its version after, which key (id) it concerns,
    which admin token (id) made it. Never a key."""

    time: float
    action: TenantAction
    tenant: str
    version: int
    key_id: str | None
    token_id: str | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TenantChange:
    """What a write does: the new record (None: delete) and the audit action."""

    record: TenantRecord | None
    action: TenantAction


TenantCompute = Callable[[TenantRecord | None], TenantChange | None]


class TenantStore(Protocol):
    """Where tenants live. Every method may raise :class:`~service.stores.store.StoreUnavailable`;
    ``write`` also :class:`~service.stores.store.WriteConflict` and whatever ``compute`` raises (then
    nothing is written)."""

    def get(self, name: str) -> TenantRecord | None: ...

    def by_key_hash(self, digest: str) -> TenantRecord | None:
        """The tenant whose live key has SHA-256 ``digest`` (None: no such key, or revoked)."""

    def all(self) -> list[TenantRecord]:
        """Every tenant, by name."""

    def write(self, name: str, compute: TenantCompute, token_id: str | None) -> TenantRecord | None:
        """Apply ``compute(current)`` atomically; version and times are set here. Returns the new record
        (None after a delete, the current one when ``compute`` returns None)."""

    def audit(self, limit: int) -> list[TenantAuditRecord]:
        """The latest ``limit`` records, newest first."""


def rotated(current: TenantRecord, new_hash: str) -> TenantRecord:
    """``current`` with the live key ``new_hash``; the key live before (none after a revoke) stays valid beside
    it until ``new_hash`` is first used. So a rotate whose answer is lost (:mod:`service.stores.write_outcome`)
    never locks the tenant out: committed or not, the key it was last shown still authenticates."""
    return TenantRecord(current.name, current.policy, new_hash, previous_key_hash=current.key_hash)


def _stamped(change: TenantChange, current: TenantRecord | None, now: float) -> TenantRecord | None:
    if change.record is None:
        return None
    created = current.created_at if current is not None else now
    return replace(change.record, version=(current.version if current else 0) + 1, created_at=created,
                   updated_at=now)


def _audit_of(change: TenantChange, current: TenantRecord | None, new: TenantRecord | None, name: str,
              token_id: str | None, now: float) -> TenantAuditRecord:
    concerned = new if new is not None and new.key_hash else current  # revoke/delete: the key that went away
    version = new.version if new is not None else (current.version + 1 if current else 1)
    return TenantAuditRecord(now, change.action, name, version, concerned.key_id if concerned else None, token_id)


class RedisTenantStore:
    """Tenants in Redis, through the word-list store's client (its connection pool, timeouts and retries).

    Args:
        client: the Redis client of :class:`~service.stores.redis_store.RedisStore` (``decode_responses``).
        namespace: ``GUARDRAIL_REDIS_PREFIX``.
        audit_max_records: audit records kept.
    """

    def __init__(self, client: redis.Redis, namespace: str, audit_max_records: int = 10_000) -> None:
        self._redis = client
        self._ns = namespace
        self._index = f"{namespace}tenants"
        self._audit = f"{namespace}tenant-audit"
        self._audit_max = audit_max_records
        #: Writes whose reply was lost, by how the check settled them (service/stores/write_outcome.py).
        self.settled: Counter[str] = Counter()

    def _record_key(self, name: str) -> str:
        return f"{self._ns}tenant:{name}"

    def _hash_key(self, digest: str) -> str:
        return f"{self._ns}tenant-key:{digest}"

    def get(self, name: str) -> TenantRecord | None:
        try:
            raw = self._redis.get(self._record_key(name))
        except RedisError as exc:
            raise StoreUnavailable(f"Redis does not answer: {exc}") from exc
        return TenantRecord.from_json(raw) if raw else None

    def by_key_hash(self, digest: str) -> TenantRecord | None:
        try:
            name = self._redis.get(self._hash_key(digest))
            if name is None:
                return None
            raw = self._redis.get(self._record_key(name))
        except RedisError as exc:
            raise StoreUnavailable(f"Redis does not answer: {exc}") from exc
        record = TenantRecord.from_json(raw) if raw else None
        # The index and the record change in one transaction; the check costs nothing and keeps a stale
        # index entry (a hand edit) from ever admitting a key the record no longer holds.
        return record if record is not None and digest in record.live_hashes else None

    def all(self) -> list[TenantRecord]:
        try:
            names = sorted(self._redis.hkeys(self._index))
            raws = self._redis.mget([self._record_key(n) for n in names]) if names else []
        except RedisError as exc:
            raise StoreUnavailable(f"Redis does not answer: {exc}") from exc
        return [TenantRecord.from_json(raw) for raw in raws if raw]

    def write(self, name: str, compute: TenantCompute, token_id: str | None) -> TenantRecord | None:
        key = self._record_key(name)
        try:
            for _ in range(_MAX_WRITE_ATTEMPTS):
                marker = new_marker(self._ns)
                with self._redis.pipeline() as pipe:
                    try:
                        pipe.watch(key, marker)
                        raw = pipe.get(key)
                        current = TenantRecord.from_json(raw) if raw else None
                        change = compute(current)
                        if change is None:
                            return current
                        now = time.time()
                        new = _stamped(change, current, now)
                        record = _audit_of(change, current, new, name, token_id, now)
                        pipe.multi()
                        old_hashes = current.live_hashes if current is not None else frozenset()
                        new_hashes = new.live_hashes if new is not None else frozenset()
                        for gone in sorted(old_hashes - new_hashes):
                            pipe.delete(self._hash_key(gone))
                        if new is None:
                            pipe.delete(key)
                            pipe.hdel(self._index, name)
                        else:
                            pipe.set(key, new.to_json())
                            pipe.hset(self._index, name, new.version)
                            for digest in sorted(new_hashes):
                                pipe.set(self._hash_key(digest), name)
                        pipe.lpush(self._audit, json.dumps(record.to_dict(), ensure_ascii=False))
                        pipe.ltrim(self._audit, 0, self._audit_max - 1)
                        execute_marked(pipe, self._redis, marker, f"tenant {name!r}", self.settled)
                        return new
                    except WatchError:
                        continue  # another writer changed this tenant: recompute against its version
        except RedisError as exc:
            raise StoreUnavailable(f"Redis does not answer: {exc}") from exc
        raise WriteConflict(f"tenant {name!r} kept changing during {_MAX_WRITE_ATTEMPTS} attempts; retry")

    def audit(self, limit: int) -> list[TenantAuditRecord]:
        try:
            rows = self._redis.lrange(self._audit, 0, max(limit, 1) - 1)
        except RedisError as exc:
            raise StoreUnavailable(f"Redis does not answer: {exc}") from exc
        return [TenantAuditRecord(**json.loads(row)) for row in rows]


class EmbeddedTenantStore:
    """Tenants in memory, written through to ``<data_dir>/tenants.json`` (replaced atomically: the commit
    point) and ``<data_dir>/tenant-audit.jsonl``.

    Raises:
        StoreUnavailable: the files cannot be read or written (the message says which).
    """

    def __init__(self, data_dir: Path, audit_max_records: int = 10_000) -> None:
        self._path = Path(data_dir) / "tenants.json"
        self._audit_path = Path(data_dir) / "tenant-audit.jsonl"
        self._lock = threading.Lock()
        self._records: dict[str, TenantRecord] = {}
        try:
            Path(data_dir).mkdir(parents=True, exist_ok=True)
            data = read_json(self._path)
            if data is not None:
                self._records = {n: TenantRecord.from_json(json.dumps(r)) for n, r in data["tenants"].items()}
            self._audit = JsonLinesLog(self._audit_path, audit_max_records)
        except (OSError, ValueError, KeyError) as exc:
            raise StoreUnavailable(f"cannot read {self._path}: {exc}") from exc
        self._by_hash = {h: r for r in self._records.values() for h in r.live_hashes}

    def get(self, name: str) -> TenantRecord | None:
        return self._records.get(name)

    def by_key_hash(self, digest: str) -> TenantRecord | None:
        return self._by_hash.get(digest)

    def all(self) -> list[TenantRecord]:
        return [self._records[n] for n in sorted(self._records)]

    def write(self, name: str, compute: TenantCompute, token_id: str | None) -> TenantRecord | None:
        with self._lock:
            current = self._records.get(name)
            change = compute(current)
            if change is None:
                return current
            now = time.time()
            new = _stamped(change, current, now)
            records = dict(self._records)
            if new is None:
                records.pop(name, None)
            else:
                records[name] = new
            body = {"tenants": {n: json.loads(r.to_json()) for n, r in sorted(records.items())}}
            try:
                write_json_atomically(self._path, body)
            except OSError as exc:
                raise StoreUnavailable(f"cannot write {self._path}: {exc}") from exc
            # Replaced, never mutated: readers on other threads see the old or the new mapping whole.
            self._records = records
            self._by_hash = {h: r for r in records.values() for h in r.live_hashes}
            record = _audit_of(change, current, new, name, token_id, now)
            try:
                self._audit.append(record.to_dict())
            except OSError:
                log.exception("tenant audit record lost", extra={"tenant": name})
            return new

    def audit(self, limit: int) -> list[TenantAuditRecord]:
        with self._lock:
            try:
                rows = self._audit.newest(limit)
            except OSError as exc:
                raise StoreUnavailable(f"cannot read {self._audit_path}: {exc}") from exc
        return [TenantAuditRecord(**row) for row in rows]
