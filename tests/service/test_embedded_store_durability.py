"""The embedded store's data directory: one process at a time (a second fails at start, naming the
directory and the holder), and a process killed with SIGKILL during writes loses no acknowledged write
and leaves a readable, writable store (docs/service.md, "Storage, replicas, outages").

SIGKILL tests the commit order (list file, then the index; the audit record after), not the fsyncs: the
kernel keeps a killed process's writes. The fsyncs are for a crash of the machine, which a test here
cannot cause."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.paths import ROOT

from guardrail.atomic_file import write_atomically
from guardrail.wordlists.wordlist import wordlist_from_terms
from service.stores.embedded import LOCK_FILE, DataDirLocked, EmbeddedStore
from service.stores.store import replacement


def start_writer(data_dir: Path, *args: str) -> subprocess.Popen[str]:
    """tests/helpers/embedded_writer.py in a process of its own (run from tests/, the package root of helpers)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "helpers.embedded_writer", str(data_dir), *args],
                            cwd=ROOT / "tests", env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_ready(process: subprocess.Popen[str]) -> int:
    """The writer's pid once its store is open (readline blocks until the line or the writer's exit)."""
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("ready "), f"writer did not open the store: {line!r} {process.stderr.read()}"
    return int(line.split()[1])


def put(store: EmbeddedStore, name: str, terms: list[str]):
    wordlist = wordlist_from_terms(terms, name=name)
    return store.write(name, lambda current: replacement(current, wordlist), None, "tok")


def test_a_second_process_fails_at_start_naming_the_directory_and_the_holder(tmp_path):
    data = tmp_path / "data"
    holder = start_writer(data, "hold")
    try:
        pid = wait_ready(holder)
        with pytest.raises(DataDirLocked) as failure:
            EmbeddedStore(data)
        assert str(data) in str(failure.value) and f"pid {pid} on host " in str(failure.value)
    finally:
        holder.communicate(input="", timeout=30)  # stdin closed: the holder closes its store and exits
    assert holder.returncode == 0

    # The other way round: this process holds the directory, a second process fails at its start.
    store = EmbeddedStore(data)
    try:
        second = start_writer(data, "hold")
        _, stderr = second.communicate(input="", timeout=60)
        assert second.returncode == 2
        assert str(data) in stderr and f"pid {os.getpid()} on host " in stderr
    finally:
        store.close()


def test_a_second_store_in_the_same_process_is_refused_until_the_first_closes(tmp_path):
    first = EmbeddedStore(tmp_path)
    put(first, "pets", ["cat"])
    with pytest.raises(DataDirLocked, match=str(tmp_path)):
        EmbeddedStore(tmp_path)
    first.close()
    first.close()  # idempotent
    second = EmbeddedStore(tmp_path)
    assert second.get("pets").version == 1
    second.close()


def test_the_lock_of_a_killed_process_is_released_by_the_kernel(tmp_path):
    holder = start_writer(tmp_path, "hold")
    wait_ready(holder)
    holder.kill()  # SIGKILL: no close(), no cleanup; the lock file stays behind with the dead pid in it
    holder.communicate(timeout=30)
    assert (tmp_path / LOCK_FILE).exists()
    store = EmbeddedStore(tmp_path)
    assert (tmp_path / LOCK_FILE).read_text().split()[0] == str(os.getpid())
    store.close()


def read_acks(lines: list[str], acked: dict[str, dict]) -> int:
    """Record each complete acknowledgement (the last per list wins); returns how many there were."""
    count = 0
    for line in lines:
        if not line.endswith("\n"):  # cut by the kill while being printed: never acknowledged
            continue
        ack = json.loads(line)
        acked[ack["list"]] = ack
        count += 1
    return count


def check_acknowledged(store: EmbeddedStore, acked: dict[str, dict]) -> None:
    for name, ack in acked.items():
        stored = store.get(name)
        if "deleted_version" in ack:  # gone, or written again after the delete (committed, not yet acked)
            assert stored is None or (ack["deleted_version"] is not None and stored.version > ack["deleted_version"]), (
                name, ack, stored)
        else:
            assert stored is not None and stored.version >= ack["version"], (name, ack, stored)
            if stored.version == ack["version"]:
                assert [t.text for t in stored.wordlist.terms] == ack["terms"], (name, ack, stored)


def test_kill_9_during_writes_loses_no_acknowledged_write(tmp_path):
    data = tmp_path / "data"
    acked: dict[str, dict] = {}
    for round_, kill_after in enumerate((25, 60, 140)):  # the third run goes past an audit compaction
        writer = start_writer(data, "loop", str(round_))
        wait_ready(writer)
        assert writer.stdout is not None
        seen = read_acks([writer.stdout.readline() for _ in range(kill_after)], acked)
        assert seen == kill_after
        os.kill(writer.pid, signal.SIGKILL)  # mid-way: the writer is writing the next change
        rest, _ = writer.communicate(timeout=30)
        assert writer.returncode == -signal.SIGKILL
        read_acks(rest.splitlines(keepends=True), acked)  # printed before the kill: acknowledged too

        store = EmbeddedStore(data, audit_max_records=50)
        try:
            check_acknowledged(store, acked)
            assert set(store.versions()) - {"after"} == {name for name in acked if store.get(name) is not None}
            assert store.audit(1000)  # readable: every line parses
            # The kept versions' files (the current ones among them), and no uncommitted file left over.
            committed = {store._list_path(n, v.version) for n in store._history for v in store.history(n)}
            assert {store._list_path(n, v) for n, v in store.versions().items()} <= committed
            assert set((data / "wordlists").glob("*.txt")) == committed
            assert not list(data.rglob(".*.tmp"))
            assert put(store, "after", ["x"]).version >= 1  # and writable
        finally:
            store.close()


def test_a_torn_audit_record_is_cut_on_open(tmp_path):
    store = EmbeddedStore(tmp_path)
    put(store, "pets", ["cat"])
    store.close()
    audit = tmp_path / "audit.jsonl"
    with audit.open("a", encoding="utf-8") as handle:
        handle.write('{"time": 1, "action": "upd')  # an append a crash interrupted
    reopened = EmbeddedStore(tmp_path)
    assert [r.version for r in reopened.audit(10)] == [1]
    assert put(reopened, "pets", ["dog"]).version == 2
    assert [r.version for r in reopened.audit(10)] == [2, 1]
    reopened.close()


def test_write_atomically_replaces_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "sub" / "index.json"
    write_atomically(path, "old")
    write_atomically(path, b"new")
    assert path.read_bytes() == b"new"
    assert [p.name for p in path.parent.iterdir()] == ["index.json"]
