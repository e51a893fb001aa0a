"""Faults: Redis dies and returns, the queue is full, a client disconnects, the model fails mid-stream.
The service keeps generating, says what is wrong (readiness, metrics), never hangs a client."""

from __future__ import annotations

import json
import threading

import httpx
import pytest
from helpers.faults import FAULT_MESSAGE, fail_forward_after
from helpers.service import ADMIN_TOKEN, CLIENT_KEY, MODEL, RedisServer, metric, start_service_process
from helpers.wait import wait_until

pytestmark = pytest.mark.slow

AUTH = {"Authorization": f"Bearer {CLIENT_KEY}"}
LONG = {"model": MODEL, "messages": [{"role": "user", "content": "Write a long story about a dragon."}],
        "temperature": 0, "max_tokens": 400, "stream": True}


def test_generation_survives_a_redis_outage_and_readiness_recovers(tmp_path):
    redis_server = RedisServer(tmp_path)
    server = start_service_process(tmp_path, {
        "GUARDRAIL_REDIS_URL": redis_server.url, "GUARDRAIL_ADMIN_TOKEN": ADMIN_TOKEN,
        "GUARDRAIL_VERSION_POLL_INTERVAL_S": "0.5"})
    try:
        wait_until(lambda: server.get("/readyz").json()["status"] == "ready", 30, "ready with Redis")
        assert metric(server.metrics(), "guardrail_redis_up") == 1
        assert server.admin("PUT", "/admin/wordlists/cities", json={"terms": ["Paris"]}).status_code == 201

        redis_server.stop()
        wait_until(lambda: server.get("/readyz").json()["status"] == "degraded", 5, "readiness reporting Redis down")
        response = server.admin("GET", "/readyz")  # the details need the admin token
        assert response.status_code == 200  # still serving from memory: stays behind the load balancer
        degraded = response.json()
        assert degraded["status"] == "degraded"
        assert degraded["checks"]["store"]["up"] is False and "Redis" in degraded["checks"]["store"]["error"]
        assert metric(server.metrics(), "guardrail_redis_up") == 0
        # Generation goes on from the in-memory lists, the list made before the outage included.
        answer = server.chat(wordlists=["en", "cities"])
        assert answer.status_code == 200, answer.text
        assert "paris" not in answer.json()["choices"][0]["message"]["content"].lower()
        assert answer.json()["usage"]["rollbacks"] >= 1
        refused = server.admin("PUT", "/admin/wordlists/towns", json={"terms": ["Lyon"]})
        assert refused.status_code == 503 and refused.json()["error"]["code"] == "store_unavailable"

        redis_server.start()  # same port, empty: it kept nothing
        wait_until(lambda: server.get("/readyz").json()["status"] == "ready", 10, "readiness after Redis returned")
        assert metric(server.metrics(), "guardrail_redis_up") == 1
        ready = server.admin("GET", "/readyz").json()
        # The empty Redis is noticed as data loss: the bundled lists are seeded again, at versions above a
        # time floor so that an ETag from before the loss never matches again (docs/service.md).
        assert ready["checks"]["store"]["data_lost"]["count"] >= 1
        assert ready["wordlists"]["en"] > 1
        assert metric(server.metrics(), "guardrail_store_resets_total") >= 1
        assert server.admin("PUT", "/admin/wordlists/towns", json={"terms": ["Lyon"]}).status_code == 201
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- service log ---\n{server.log_tail()}") from None
    finally:
        server.stop()
        redis_server.stop()


def endless(service) -> dict:
    """A streaming request that cannot end before max_tokens: every EOS id is biased away."""
    return {**LONG, "logit_bias": {str(i): -100 for i in service.runtime.decoder.eos_ids}}


class Streamer(threading.Thread):
    """A streaming chat request in a thread: records the first data line, then holds the connection
    open until ``release`` is set and closes it (a client going away)."""

    def __init__(self, service) -> None:
        super().__init__(daemon=True)
        self.base_url = service.base_url
        self.body = endless(service)
        self.status: int | None = None
        self.first_line = threading.Event()
        self.release = threading.Event()

    def run(self) -> None:
        with httpx.stream("POST", f"{self.base_url}/v1/chat/completions", json=self.body, headers=AUTH,
                          timeout=120) as response:
            self.status = response.status_code
            # Hold on to the iterator: a dropped one is closed, and httpx closes the connection with it.
            lines = response.iter_lines()
            for line in lines:
                if line.startswith("data: "):
                    self.first_line.set()
                    break
            self.release.wait(60)
            del lines  # now the connection closes: the client is gone


def test_a_full_queue_answers_429_with_retry_after(service):
    cancelled_before = metric(service.metrics(), "guardrail_generations_cancelled_total")
    running, queued = Streamer(service), Streamer(service)
    running.start()
    try:
        assert running.first_line.wait(60), "the first stream never started"
        queued.start()
        wait_until(lambda: metric(service.metrics(), "guardrail_queue_depth") == 1, 10, "one request queued")
        refused = service.chat()  # one running + one waiting = the queue (max_queue=1) is full
        assert refused.status_code == 429
        assert int(refused.headers["Retry-After"]) >= 1
        assert refused.json()["error"]["type"] == "rate_limit_error"
        assert refused.json()["error"]["code"] == "queue_full"
    finally:
        running.release.set()
        queued.release.set()
        running.join(60)
        queued.join(60)
    # Both clients left: both generations end as cancelled (the next test counts its own).
    wait_until(lambda: metric(service.metrics(), "guardrail_generations_cancelled_total") == cancelled_before + 2,
               30, "both generations cancelled")
    assert metric(service.metrics(), "guardrail_queue_depth") == 0


def test_a_client_that_disconnects_cancels_its_generation(service):
    before = service.metrics()
    client = Streamer(service)
    client.start()
    assert client.first_line.wait(60)
    client.release.set()  # closes the connection mid-generation (400 tokens asked)
    client.join(30)
    wait_until(lambda: metric(service.metrics(), "guardrail_generations_cancelled_total")
               == metric(before, "guardrail_generations_cancelled_total") + 1, 15, "generation cancelled")
    after = service.metrics()
    assert metric(after, "guardrail_finishes_total", reason="cancelled") == \
        metric(before, "guardrail_finishes_total", reason="cancelled") + 1
    # The model is free again at once (it did not run the 400 tokens to the end).
    assert service.chat(max_tokens=2).status_code == 200


def test_a_failure_mid_stream_ends_with_an_error_event_then_done(service, monkeypatch):
    fail_forward_after(monkeypatch, service.runtime.model, 6)
    before = metric(service.metrics(), "guardrail_finishes_total", reason="error")
    with httpx.stream("POST", f"{service.base_url}/v1/chat/completions", json=LONG, headers=AUTH,
                      timeout=60) as response:
        assert response.status_code == 200
        events = [line.removeprefix("data: ") for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    error = json.loads(events[-2])["error"]
    assert error["type"] == "server_error" and error["code"] == "generation_failed"
    assert FAULT_MESSAGE not in error["message"]  # internals stay in the log
    assert any(json.loads(e)["choices"][0]["delta"].get("content") for e in events[:-2])  # it was mid-stream
    assert metric(service.metrics(), "guardrail_finishes_total", reason="error") == before + 1
