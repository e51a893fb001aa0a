"""The embedded word-list store: in-process, persisted as files under ``GUARDRAIL_DATA_DIR``.

Layout (all UTF-8)::

    <data_dir>/wordlists/<name>.v<version>.txt   a kept version of the list in the word-list format (docs/wordlists.md)
    <data_dir>/wordlists/index.json    {"lists": {name: {"version", "updated_at"}}, "counters": {name: n},
                                        "history": {name: [{"version", "updated_at", "terms", "allow"}, ...]}}
    <data_dir>/audit.jsonl             one AuditRecord per line, oldest first

    <data_dir>/.lock                   the data directory's lock; holds the pid and host of its holder

Every file is replaced atomically and durably (write a temporary file in the same directory, fsync,
``os.replace``, fsync the directory: :func:`guardrail.atomic_file.write_atomically`), so a crash of the
process or the machine leaves either the old or the new version. A new version goes to a new file and
the index, written last, is the commit point: a list file the index does not name is removed on load. The
index's ``history`` names the kept versions (oldest first, at most ``history_max``); the file of a version
that falls out of it is removed after the commit.
``write`` returns (the change is acknowledged) only after the index's rename is durable. The audit
record is appended and fsynced after the commit; a record torn by a crash is cut off on load.

One process per data directory, enforced: the store takes an exclusive ``flock(2)`` on ``.lock`` when it
opens and keeps it until :meth:`EmbeddedStore.close` or the process ends (the kernel releases it on any
exit, ``kill -9`` included, so a crash never leaves a stale lock). A second process, or a second store
in the same process, fails at once with :class:`DataDirLocked` naming the directory and the holder's
pid and host. ``fcntl.flock`` rather than the ``filelock`` package: the holder's pid goes in the lock
file itself, and ``filelock`` falls back to an existence-based lock where ``flock`` is missing, which a
``kill -9`` leaves behind. Sharing lists between processes is what the Redis store is for.
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import threading
import time
from pathlib import Path

from guardrail.atomic_file import fsync_directory, read_json, write_atomically, write_json_atomically
from guardrail.wordlists.wordlist import format_wordlist, parse_wordlist
from service.stores.audit_log import JsonLinesLog
from service.stores.store import (
    DEFAULT_HISTORY,
    AuditRecord,
    Compute,
    Precondition,
    PreconditionFailed,
    StoredWordList,
    StoreUnavailable,
    VersionInfo,
    trimmed,
)

log = logging.getLogger("guardrail.service.store")

#: The lock file's name inside the data directory.
LOCK_FILE = ".lock"


class DataDirLocked(StoreUnavailable):
    """The data directory is in use by another process (or another store in this one)."""


class EmbeddedStore:
    """Word lists in memory, written through to ``data_dir``; survives a restart.

    Args:
        data_dir: directory for the files above (created if missing).
        audit_max_records: audit records kept; older ones are dropped when the file is compacted.
        history_max: versions of each list kept (the current one included).

    Raises:
        DataDirLocked: at construction, when another process (or another open store) holds the data
            directory; the message names the directory and the holder's pid and host.
        StoreUnavailable: from any method when the files cannot be read or written (message says which).
    """

    kind = "embedded"

    def __init__(self, data_dir: Path, audit_max_records: int = 10_000, history_max: int = DEFAULT_HISTORY) -> None:
        self._dir = Path(data_dir)
        self._lists_dir = self._dir / "wordlists"
        self._index_path = self._lists_dir / "index.json"
        self._audit_path = self._dir / "audit.jsonl"
        self._audit_max = audit_max_records
        self._audit: JsonLinesLog | None = None  # opened by _load
        self._lock = threading.Lock()
        self._lists: dict[str, StoredWordList] = {}
        self._counters: dict[str, int] = {}
        self._history_max = history_max
        self._history: dict[str, list[VersionInfo]] = {}  # oldest first
        self._lock_fd = self._lock_data_dir()
        try:
            self._load()
        except BaseException:
            self.close()
            raise

    # -- the data directory's lock ----------------------------------------------------------------
    def _lock_data_dir(self) -> int:
        """Create the data directory if needed and take its lock; returns the lock file's descriptor."""
        try:
            for directory in (self._dir, self._lists_dir):
                if not directory.is_dir():
                    directory.mkdir(parents=True, exist_ok=True)
                    fsync_directory(directory.parent)  # the new directory's name is durable too
            fd = os.open(self._dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StoreUnavailable(f"cannot open the embedded store in {self._dir}: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 256, 0).decode("utf-8", "replace").split()
            os.close(fd)
            who = f"pid {holder[0]} on host {holder[1]}" if len(holder) == 2 else "a process that is starting"
            raise DataDirLocked(
                f"the data directory {self._dir} is in use by {who} (lock file {self._dir / LOCK_FILE}): one "
                "process per data directory; stop that process, give this one another GUARDRAIL_DATA_DIR, or "
                "share lists through Redis (GUARDRAIL_REDIS_URL)") from None
        except OSError as exc:
            os.close(fd)
            raise StoreUnavailable(f"cannot lock the data directory {self._dir}: {exc}") from exc
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)
        return fd

    # -- reading ----------------------------------------------------------------------------------
    def _load(self) -> None:
        try:
            index = read_json(self._index_path)
            if index is not None:
                self._counters = {k: int(v) for k, v in index.get("counters", {}).items()}
                for name, meta in index.get("lists", {}).items():
                    path = self._list_path(name, int(meta["version"]))
                    self._lists[name] = StoredWordList(
                        parse_wordlist(path.read_text(encoding="utf-8"), name, source=str(path)),
                        int(meta["version"]),
                        float(meta["updated_at"]),
                    )
                for name, entries in index.get("history", {}).items():
                    self._history[name] = [VersionInfo(**entry) for entry in entries]
            for name, stored in self._lists.items():  # an index written before versions were kept
                self._history.setdefault(name, [VersionInfo.of(stored)])
            referenced = {self._list_path(n, e.version) for n, entries in self._history.items() for e in entries}
            leftovers = [*self._lists_dir.glob("*.v*.txt"), *self._lists_dir.glob(".*.tmp"), *self._dir.glob(".*.tmp")]
            for leftover in leftovers:
                if leftover not in referenced:  # written by a change that never committed
                    leftover.unlink(missing_ok=True)
            self._audit = JsonLinesLog(self._audit_path, self._audit_max)
        except (OSError, ValueError, KeyError) as exc:
            raise StoreUnavailable(f"cannot read the embedded store in {self._dir}: {exc}") from exc

    def _list_path(self, name: str, version: int) -> Path:
        return self._lists_dir / f"{name}.v{version}.txt"

    def ping(self) -> None:
        if not self._dir.is_dir():
            raise StoreUnavailable(f"data directory {self._dir} is missing")

    def versions(self) -> dict[str, int]:
        with self._lock:
            return {name: stored.version for name, stored in self._lists.items()}

    def get(self, name: str) -> StoredWordList | None:
        with self._lock:
            return self._lists.get(name)

    def has_history(self, name: str) -> bool:
        with self._lock:
            return name in self._counters

    def audit(self, limit: int) -> list[AuditRecord]:
        assert self._audit is not None, "opened by _load"
        with self._lock:
            try:
                rows = self._audit.newest(limit)
            except OSError as exc:
                raise StoreUnavailable(f"cannot read {self._audit_path}: {exc}") from exc
        return [AuditRecord(**row) for row in rows]

    def history(self, name: str) -> list[VersionInfo]:
        with self._lock:
            return list(reversed(self._history.get(name, [])))

    def get_version(self, name: str, version: int) -> StoredWordList | None:
        with self._lock:  # a write may remove the file of a version that falls out of the history
            entry = next((e for e in self._history.get(name, []) if e.version == version), None)
            if entry is None:
                return None
            path = self._list_path(name, version)
            try:
                text = path.read_text(encoding="utf-8")
            except OSError as exc:
                raise StoreUnavailable(f"cannot read {path}: {exc}") from exc
        return StoredWordList(parse_wordlist(text, name, source=str(path)), version, entry.updated_at)

    # -- writing ----------------------------------------------------------------------------------
    def write(
        self, name: str, compute: Compute, precondition: Precondition | None, token_id: str | None
    ) -> StoredWordList | None:
        with self._lock:
            current = self._lists.get(name)
            if precondition is not None and not precondition.holds_for(current):
                raise PreconditionFailed.of(name, current)
            change = compute(current)
            if change is None:
                return current
            version = self._counters.get(name, 0) + 1
            now = time.time()
            lists = dict(self._lists)
            counters = {**self._counters, name: version}
            stored = None
            if change.wordlist is not None:
                stored = StoredWordList(change.wordlist, version, now)
            kept, cut = trimmed(self._history.get(name, []), VersionInfo.of(stored) if stored else None,
                                self._history_max)
            history = {**self._history, name: kept}
            try:
                if stored is None:
                    lists.pop(name, None)
                else:
                    write_atomically(self._list_path(name, version), format_wordlist(stored.wordlist))
                    lists[name] = stored
                # The index is the commit point: until it is replaced, the previous version is served.
                self._write_index(lists, counters, history)
            except OSError as exc:
                raise StoreUnavailable(f"cannot write the embedded store in {self._dir}: {exc}") from exc
            for old in cut:  # out of the history now
                self._list_path(name, old).unlink(missing_ok=True)
            self._lists, self._counters, self._history = lists, counters, history
            record = AuditRecord(now, change.action, name, version, token_id, change.added, change.removed)
            try:
                self._append_audit(record)
            except OSError:
                log.exception("audit record lost", extra={"list": name, "version": version})
            return stored

    def _write_index(self, lists: dict[str, StoredWordList], counters: dict[str, int],
                     history: dict[str, list[VersionInfo]]) -> None:
        index = {
            "lists": {n: {"version": s.version, "updated_at": s.updated_at} for n, s in sorted(lists.items())},
            "counters": dict(sorted(counters.items())),
            "history": {n: [e.to_dict() for e in entries] for n, entries in sorted(history.items())},
        }
        write_json_atomically(self._index_path, index)

    def _append_audit(self, record: AuditRecord) -> None:
        assert self._audit is not None, "opened by _load"
        self._audit.append(record.to_dict())

    def close(self) -> None:
        """Release the data directory's lock (every write is already on disk); idempotent."""
        fd, self._lock_fd = self._lock_fd, -1
        if fd >= 0:
            os.close(fd)  # closing the only descriptor of the open file releases the flock
