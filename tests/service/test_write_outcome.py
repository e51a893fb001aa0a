"""Writes whose outcome is known (docs/service.md "Writes and their outcome"), against a real redis-server of
the test's own: its ``EXEC`` replies time out (``CLIENT PAUSE ... WRITE`` or ``DEBUG SLEEP`` longer than the
client's read timeout: the first holds the transaction back, the second runs it after the client gave up)
and it is killed and restarted mid-update (an append-only file synced before each reply, so a kill
loses nothing acknowledged). The floor: no acknowledged write lost, no tenant locked out.
"""

from __future__ import annotations

import random
import threading

import pytest
import redis
from helpers.service import RedisServer
from helpers.wait import wait_until

from guardrail.wordlists.wordlist import format_wordlist, wordlist_from_terms
from service.stores.redis_store import RedisStore
from service.stores.store import Precondition, StoreUnavailable, WriteOutcomeUnknown, replacement
from service.tenants.keys import key_hash, new_key
from service.tenants.policy import TenantPolicy
from service.tenants.store import RedisTenantStore, TenantChange, TenantRecord, rotated

TIMEOUT_S = 0.3  # the client's read timeout: a pause longer than it loses the EXEC reply
PREFIX = "outcome-test:"


@pytest.fixture
def server(tmp_path):
    redis_server = RedisServer(tmp_path, durable=True, args=("--enable-debug-command", "local"))
    yield redis_server
    redis_server.stop()


def admin(server: RedisServer) -> redis.Redis:
    return redis.Redis.from_url(server.url, socket_timeout=5, decode_responses=True)


def put(store: RedisStore, name: str, terms: list[str], precondition: Precondition | None = None):
    wordlist = wordlist_from_terms(terms, name=name)
    return store.write(name, lambda current: replacement(current, wordlist), precondition, "tok")


def pause_writes(server: RedisServer, ms: int) -> None:
    """Every write command (EXEC of a transaction that writes included) waits ``ms`` milliseconds; reads go on."""
    admin(server).execute_command("CLIENT", "PAUSE", str(ms), "WRITE")


def test_a_write_whose_reply_is_lost_answers_what_happened(server):
    store = RedisStore(server.url, PREFIX, timeout_s=TIMEOUT_S)
    put(store, "pets", ["cat"])
    pause_writes(server, 1000)  # > the timeout: the EXEC reply is lost; < the check's retries: it is settled
    try:
        answer = put(store, "pets", ["dog"])
    except WriteOutcomeUnknown:
        pytest.fail("the check had time to settle the outcome")
    except StoreUnavailable:
        answer = None  # checked: not committed
    current = RedisStore(server.url, PREFIX).get("pets")
    if answer is None:
        assert [t.text for t in current.wordlist.terms] == ["cat"]
    else:
        assert current.etag == answer.etag and [t.text for t in current.wordlist.terms] == ["dog"]
    admin(server).execute_command("CLIENT", "UNPAUSE")
    # Settled means final: a transaction fenced as not committed never commits later.
    assert RedisStore(server.url, PREFIX).get("pets").etag == current.etag


def test_a_write_whose_outcome_cannot_be_told_says_so(server):
    store = RedisStore(server.url, PREFIX, timeout_s=TIMEOUT_S)
    put(store, "pets", ["cat"])
    pause_writes(server, 20_000)  # longer than every try of the check
    try:
        with pytest.raises(WriteOutcomeUnknown, match="read it back"):
            put(store, "pets", ["dog"])
    finally:
        admin(server).execute_command("CLIENT", "UNPAUSE")


def test_a_tenant_etag_names_its_version_and_content(server):
    tenants = RedisTenantStore(redis.Redis.from_url(server.url, decode_responses=True), PREFIX)
    record = tenants.write("app", lambda _: TenantChange(TenantRecord("app", TenantPolicy(), key_hash(new_key())),
                                                         "create"), "tok")
    stale = Precondition.if_match(record.etag)
    tenants.write("app", lambda cur: TenantChange(TenantRecord("app", TenantPolicy(requests_per_minute=5),
                                                               cur.key_hash), "update"), "tok")
    current = tenants.get("app")
    digest = current.etag.strip('"').partition("-")[2]
    assert Precondition.if_match(current.etag).holds(current.version, digest)
    assert not stale.holds(current.version, digest)
    # The same version number with other content (a Redis that lost part of its data) does not match.
    assert not Precondition.if_match(f'"v{current.version}-{"0" * 12}"').holds(current.version, digest)


class Faults:
    """Lost EXEC replies and restarts of ``server``, at random, until stopped."""

    def __init__(self, server: RedisServer, seed: int) -> None:
        self.server, self.rng = server, random.Random(seed)
        self.stop = threading.Event()
        self.pauses = self.sleeps = self.restarts = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(self.rng.uniform(0.05, 0.3)):
            try:
                draw = self.rng.random()
                if draw < 0.2:
                    self.server.kill()
                    self.server.start()
                    self.restarts += 1
                elif draw < 0.6:
                    admin(self.server).execute_command("DEBUG", "SLEEP", str(self.rng.choice([0.4, 0.8])))
                    self.sleeps += 1
                else:
                    pause_writes(self.server, self.rng.choice([400, 800, 1500]))
                    self.pauses += 1
            except redis.RedisError:
                continue


def test_no_acknowledged_write_is_lost_and_no_tenant_locked_out_under_lost_replies_and_restarts(server):
    store = RedisStore(server.url, PREFIX, timeout_s=TIMEOUT_S)
    tenants = RedisTenantStore(store.client, PREFIX)
    names = [f"t{i}" for i in range(3)]
    shown: dict[str, str] = {}  # the key each tenant was last shown: it must authenticate at the end
    for name in names:
        key = new_key()
        tenants.write(name, lambda _, n=name, k=key: TenantChange(TenantRecord(n, TenantPolicy(), key_hash(k)),
                                                                   "create"), "tok")
        shown[name] = key
    lists = [f"l{i}" for i in range(3)]
    # Per list: the body of the last acknowledged write, and of the writes after it whose outcome is unknown.
    acked: dict[str, str | None] = dict.fromkeys(lists)
    maybe: dict[str, list[str]] = {n: [] for n in lists}
    outcomes = {"acked": 0, "not_committed": 0, "unknown": 0}

    faults = Faults(server, seed=31)
    faults.thread.start()
    try:
        for step in range(600):
            if step % 3 == 0:
                name = names[(step // 3) % len(names)]
                key = new_key()
                try:
                    tenants.write(name, lambda cur, k=key: TenantChange(rotated(cur, key_hash(k)), "rotate"), "tok")
                except WriteOutcomeUnknown:
                    outcomes["unknown"] += 1
                except StoreUnavailable:
                    outcomes["not_committed"] += 1
                else:
                    outcomes["acked"] += 1
                    shown[name] = key
            else:
                name = lists[(step // 3) % len(lists)]
                terms = [f"term{step}"]
                body = format_wordlist(wordlist_from_terms(terms, name=name))
                try:
                    put(store, name, terms)
                except WriteOutcomeUnknown:
                    outcomes["unknown"] += 1
                    maybe[name].append(body)
                except StoreUnavailable:
                    outcomes["not_committed"] += 1
                else:
                    outcomes["acked"] += 1
                    acked[name], maybe[name] = body, []
    finally:
        faults.stop.set()
        faults.thread.join(timeout=30)
    client = admin(server)
    wait_until(lambda: client.ping(), 10, "redis after the faults")
    client.execute_command("CLIENT", "UNPAUSE")

    lost_replies = store.settled + tenants.settled
    assert faults.pauses and faults.sleeps and faults.restarts and outcomes["acked"], outcomes
    assert lost_replies["committed"] and lost_replies["not_committed"], lost_replies  # both paths ran
    assert store.resets == 0, "the append-only file kept the data through every restart"
    reader = RedisStore(server.url, PREFIX)
    for name in lists:
        current = reader.get(name)
        allowed = {acked[name], *maybe[name]} - {None}
        assert current is not None and format_wordlist(current.wordlist) in allowed, (name, outcomes)
    reader_tenants = RedisTenantStore(reader.client, PREFIX)
    locked_out = [n for n in names if reader_tenants.by_key_hash(key_hash(shown[n])) is None]
    assert locked_out == [], outcomes
