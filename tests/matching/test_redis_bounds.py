"""Redis stalls are bounded by ``GUARDRAIL_REDIS_TIMEOUT_S``: every client gets the timeouts and no
redis-py retry (guardrail/redis_client.py), a stopped Redis and a hung one fail each call after one
attempt, the stores and the artefact cache fall back, and the service stays up (docs/service.md,
"Storage, replicas, outages")."""

from __future__ import annotations

import os
import signal
import socket
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import redis
from helpers.service import ADMIN_TOKEN, CLIENT_KEY, MODEL, RedisServer, serve_in_thread
from helpers.wait import wait_until

from guardrail.matching.cache import ArtefactCache
from guardrail.redis_client import DEFAULT_TIMEOUT_S, bounded_client, worst_case_stall_s
from guardrail.wordlists.wordlist import wordlist_from_terms
from service.catalog import WordListCatalog
from service.metrics import ServiceMetrics
from service.stores.redis_store import RedisStore
from service.stores.store import StoreUnavailable, replacement

TIMEOUT_S = 0.2


class SilentServer:
    """A TCP server that accepts connections and never answers (``close=False``: it stands in for a hung
    Redis, which the kernel still accepts connections for) or closes each one at once (``close=True``: a
    Redis that drops its clients). Counts the connections it accepted, i.e. the client's attempts."""

    def __init__(self, close: bool = False) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=256)
        self.url = f"redis://127.0.0.1:{self._listener.getsockname()[1]}/0"
        self._close = close
        self._peers: list[int] = []  # source ports of the accepted connections, in order
        self._markers: set[int] = set()
        self._held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, (_, port) = self._listener.accept()
            except OSError:  # closed by stop()
                return
            self._peers.append(port)
            if self._close:
                conn.close()
            else:
                self._held.append(conn)

    def attempts(self) -> int:
        """Connections accepted so far, counted after every earlier connection was accepted: a marker
        connection goes through the same (FIFO) accept queue and is not counted."""
        with socket.create_connection(self._listener.getsockname()) as marker:
            port = marker.getsockname()[1]
            self._markers.add(port)
            wait_until(lambda: port in self._peers, 10, "the marker connection accepted", interval_s=0.01)
            return sum(1 for p in self._peers[: self._peers.index(port)] if p not in self._markers)

    def stop(self) -> None:
        self._listener.close()
        for conn in self._held:
            conn.close()


@pytest.fixture
def hung():
    server = SilentServer()
    yield server
    server.stop()


@pytest.fixture
def prefix() -> str:
    return f"guardrail-test:{uuid.uuid4().hex}:"


def connection_settings(client: redis.Redis) -> tuple[float, float, int]:
    kwargs = client.connection_pool.connection_kwargs
    return kwargs["socket_timeout"], kwargs["socket_connect_timeout"], kwargs["retry"].get_retries()


def test_every_client_gets_the_timeout_it_is_given_and_no_retry(redis_url, prefix):
    store = RedisStore(redis_url, prefix, timeout_s=0.3)
    cache = ArtefactCache(redis_url, key_prefix=prefix, redis_timeout_s=0.3)
    assert connection_settings(store._redis) == (0.3, 0.3, 0)
    assert connection_settings(cache._redis) == (0.3, 0.3, 0)
    assert connection_settings(ArtefactCache(redis_url)._redis) == (DEFAULT_TIMEOUT_S, DEFAULT_TIMEOUT_S, 0)
    # The settings reach the connections actually made.
    store.ping()
    connection = store._redis.connection_pool.get_connection()
    try:
        assert (connection.socket_timeout, connection.socket_connect_timeout) == (0.3, 0.3)
        assert connection.retry.get_retries() == 0
    finally:
        store._redis.connection_pool.release(connection)
    assert worst_case_stall_s(0.3) == pytest.approx(0.6)
    with pytest.raises(ValueError, match="timeout_s"):
        bounded_client(redis_url, 0)


def test_a_hung_redis_costs_each_call_one_attempt_and_one_timeout(hung, prefix):
    store = RedisStore(hung.url, prefix, timeout_s=TIMEOUT_S)
    with pytest.raises(StoreUnavailable, match="Redis does not answer") as failure:
        store.versions()
    # A timeout, after one attempt: the stall is then one connect plus one read timeout at most
    # (worst_case_stall_s); redis-py's default policy made 121 attempts here (10 retries, each retrying
    # connect), ~70 s. Counted, not timed: a wall-clock bound would fail on a loaded machine for no reason.
    assert isinstance(failure.value.__cause__, redis.TimeoutError)
    assert hung.attempts() == 1
    with pytest.raises(StoreUnavailable):
        store.write("pets", lambda current: replacement(current, wordlist_from_terms(["cat"], name="pets")), None,
                    "tok")
    assert hung.attempts() == 2  # the write failed at its first call


def test_a_redis_that_drops_connections_is_not_retried(prefix):
    dropping = SilentServer(close=True)
    try:
        with pytest.raises(StoreUnavailable) as failure:
            RedisStore(dropping.url, prefix, timeout_s=TIMEOUT_S).versions()
        assert isinstance(failure.value.__cause__, redis.ConnectionError)
        assert dropping.attempts() == 1
    finally:
        dropping.stop()


def test_an_artefact_lookup_against_a_hung_redis_compiles_and_waits_once(hung, smollm2_vocab, tmp_path):
    lookups: list[str] = []
    cache = ArtefactCache(hung.url, tmp_path, key_prefix="guardrail-test:", redis_timeout_s=TIMEOUT_S,
                          on_lookup=lookups.append)
    lists = [wordlist_from_terms(["listen", "sorry"], name="bounded")]
    artefact, layer = cache.get(smollm2_vocab, lists)
    assert layer == "compile" and artefact is not None
    assert hung.attempts() == 1  # the read timed out; the compiled artefact is not written to it
    # A fresh cache (another replica, a restart) finds it on disk, again with one attempt at Redis.
    assert ArtefactCache(hung.url, tmp_path, redis_timeout_s=TIMEOUT_S).get(smollm2_vocab, lists)[1] == "disk"
    assert hung.attempts() == 2
    assert lookups == ["compile"]


@contextmanager
def paused(server: RedisServer) -> Iterator[None]:
    """A real Redis that is hung: SIGSTOP keeps its port open (the kernel accepts connections into the
    backlog) while the process answers nothing, as a Redis stuck in swap or a long fork does."""
    assert server.process is not None
    os.kill(server.process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(server.process.pid, signal.SIGCONT)


def test_the_store_and_cache_fall_back_while_a_real_redis_is_stopped_or_hung(tmp_path, prefix, smollm2_vocab):
    server = RedisServer(tmp_path)
    try:
        store = RedisStore(server.url, prefix, timeout_s=TIMEOUT_S)
        store.write("pets", lambda current: replacement(current, wordlist_from_terms(["cat"], name="pets")), None,
                    "tok")
        metrics = ServiceMetrics(with_redis=True)
        catalog = WordListCatalog(store, metrics, lambda: [], poll_interval_s=30)
        catalog.refresh()
        assert catalog.healthy

        with paused(server):
            with pytest.raises(StoreUnavailable) as failure:
                store.versions()
            assert isinstance(failure.value.__cause__, redis.TimeoutError)
            catalog.refresh()
            assert not catalog.healthy and metrics.redis_up._value.get() == 0
            assert catalog.resolve(["pets"])[0].version == 1  # requests are served from the copy
            cache = ArtefactCache(server.url, key_prefix=prefix, redis_timeout_s=TIMEOUT_S)
            assert cache.get(smollm2_vocab, [catalog.get("pets").wordlist])[1] == "compile"
        catalog.refresh()  # the same store and pooled connections work again once Redis answers
        assert catalog.healthy and store.versions() == {"pets": 1}

        server.stop()
        with pytest.raises(StoreUnavailable) as failure:
            store.versions()
        assert isinstance(failure.value.__cause__, redis.ConnectionError)
        catalog.refresh()
        assert not catalog.healthy and catalog.resolve(["pets"])[0].version == 1
        cache = ArtefactCache(server.url, key_prefix=prefix, redis_timeout_s=TIMEOUT_S)
        assert cache.get(smollm2_vocab, [wordlist_from_terms(["dog"], name="stopped")])[1] == "compile"
        server.start()  # same port, empty; the pool's dead connections are replaced without a retry
        catalog.refresh()
        assert catalog.healthy
    finally:
        server.stop()


# -- the service (real SmolLM2 in a thread of this process, its own Redis) ----------------------------


def service_on(redis_url: str, data_dir, timeout_s: float):
    from service.settings import Settings

    settings = Settings(model=MODEL, redis_url=redis_url, redis_prefix=f"guardrail-test:{uuid.uuid4().hex}:",
                        redis_timeout_s=timeout_s, admin_token=ADMIN_TOKEN, api_keys=[CLIENT_KEY],
                        data_dir=data_dir, version_poll_interval_s=0.5, default_max_tokens=24)
    return serve_in_thread(settings)


@pytest.mark.slow
def test_the_service_stays_up_while_its_redis_is_hung(tmp_path):
    redis_server = RedisServer(tmp_path)
    try:
        with service_on(redis_server.url, tmp_path / "data", timeout_s=0.3) as server:
            runtime = server.runtime
            # GUARDRAIL_REDIS_TIMEOUT_S reaches both clients (0.3 is not the library default).
            assert connection_settings(runtime.store._redis) == (0.3, 0.3, 0)
            assert connection_settings(runtime.artefacts._redis) == (0.3, 0.3, 0)
            wait_until(lambda: server.get("/readyz").json()["status"] == "ready", 30, "ready with Redis")
            assert server.admin("PUT", "/admin/wordlists/cities", json={"terms": ["Paris"]}).status_code == 201
            wait_until(lambda: "cities" in server.admin("GET", "/readyz").json()["wordlists"], 10, "the new list served")

            with paused(redis_server):
                wait_until(lambda: server.get("/readyz").json()["status"] == "degraded", 10,
                           "readiness reporting the hung Redis")
                ready = server.admin("GET", "/readyz")
                assert ready.status_code == 200 and "Timeout" in ready.json()["checks"]["store"]["error"]
                assert server.get("/healthz").status_code == 200
                # Generation goes on from memory; a list set never used before misses the in-process
                # artefact cache, waits once on the hung Redis and compiles.
                for lists in (["en", "cities"], ["cities"]):
                    answer = server.chat(wordlists=lists)
                    assert answer.status_code == 200, answer.text
                    assert "paris" not in answer.json()["choices"][0]["message"]["content"].lower()
                refused = server.admin("PUT", "/admin/wordlists/towns", json={"terms": ["Lyon"]})
                assert refused.status_code == 503 and refused.json()["error"]["code"] == "store_unavailable"

            wait_until(lambda: server.get("/readyz").json()["status"] == "ready", 10, "ready after Redis resumed")
            assert server.admin("PUT", "/admin/wordlists/towns", json={"terms": ["Lyon"]}).status_code == 201

            redis_server.stop()  # and a stopped one: connections refused
            wait_until(lambda: server.get("/readyz").json()["status"] == "degraded", 10,
                       "readiness reporting the stopped Redis")
            answer = server.chat(wordlists=["towns"])  # a list set never used before: one failed GET, compile
            assert answer.status_code == 200, answer.text
            refused = server.admin("PUT", "/admin/wordlists/villages", json={"terms": ["Gap"]})
            assert refused.status_code == 503 and refused.json()["error"]["code"] == "store_unavailable"
            assert server.get("/healthz").status_code == 200
    finally:
        redis_server.stop()
