"""A rollout under load: ``guardrail serve`` (real SmolLM2, embedded store) gets SIGTERM while 8 streams
run and a ninth request waits in the queue.

Issue 22's "Done when": no stream ends without its ``[DONE]`` (each finishes normally, or with an
``error`` event then ``[DONE]``), and the process exits within the drain timeout plus a margin. On the way:
readiness sheds the queue over its threshold, goes 503 once draining, and new requests get 503 with
``Retry-After``.
"""

from __future__ import annotations

import json
import signal
import threading
import time

import httpx
import pytest
from helpers.service import ADMIN_TOKEN, CLIENT_KEY, MODEL, metric, start_service_process
from helpers.wait import wait_until

DRAIN_TIMEOUT_S = 4.0
# Past the drain: ending the streams, uvicorn's close (service.drain.CLOSE_TIMEOUT_S), the lifespan
# shutdown and the interpreter's exit. A deadline, not a speed claim: without the drain the streams below
# would run for minutes (3,000 tokens each, ignore_eos, a 600 s request limit).
EXIT_MARGIN_S = 60.0
STREAMS = 8
FIRST_CHUNK_TIMEOUT_S = 300  # artefact compile and 8 prefills on a shared 2-core machine
HEADERS = {"Authorization": f"Bearer {CLIENT_KEY}"}


def body(stream: bool) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": "Tell me a very long story."}],
            "max_tokens": 3000, "ignore_eos": True, "temperature": 0, "stream": stream}


class StreamReader(threading.Thread):
    """One streaming chat request read to its end: its SSE ``data:`` payloads, in order."""

    def __init__(self, base_url: str) -> None:
        super().__init__(daemon=True)
        self.base_url = base_url
        self.status: int | None = None
        self.payloads: list[str] = []
        self.first_chunk = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with httpx.stream("POST", self.base_url + "/v1/chat/completions", json=body(True), headers=HEADERS,
                              timeout=httpx.Timeout(30, read=FIRST_CHUNK_TIMEOUT_S)) as response:
                self.status = response.status_code
                for line in response.iter_lines():
                    if line.startswith("data: "):
                        self.payloads.append(line.removeprefix("data: "))
                        self.first_chunk.set()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def ending(self) -> str:
        """How the stream ended: ``finished`` (finish_reason chunk then [DONE]) or the error's code."""
        assert self.error is None, repr(self.error)
        assert self.status == 200
        assert self.payloads and self.payloads[-1] == "[DONE]", self.payloads[-3:]
        assert self.payloads.count("[DONE]") == 1
        last = json.loads(self.payloads[-2])
        if "error" in last:
            return last["error"]["code"]
        assert last["choices"][0]["finish_reason"] is not None, last
        return "finished"


class QueuedRequest(threading.Thread):
    """A non-streaming request sent while every worker thread is busy: it waits in the queue."""

    def __init__(self, base_url: str) -> None:
        super().__init__(daemon=True)
        self.base_url = base_url
        self.response: httpx.Response | None = None

    def run(self) -> None:
        self.response = httpx.post(self.base_url + "/v1/chat/completions", json=body(False), headers=HEADERS,
                                   timeout=FIRST_CHUNK_TIMEOUT_S)


@pytest.mark.slow
def test_sigterm_under_8_streams_ends_every_stream_with_done_within_the_drain_timeout(tmp_path):
    server = start_service_process(tmp_path, {
        "GUARDRAIL_API_KEYS": CLIENT_KEY,
        "GUARDRAIL_ADMIN_TOKEN": ADMIN_TOKEN,  # readiness details (/readyz with the admin token)
        "GUARDRAIL_DRAIN_TIMEOUT_S": str(DRAIN_TIMEOUT_S),
        "GUARDRAIL_REQUEST_TIMEOUT_S": "600",
        "GUARDRAIL_MAX_BATCH": str(STREAMS),  # 8 worker threads
        "GUARDRAIL_MAX_QUEUE": "2",
        "GUARDRAIL_READY_QUEUE_FRACTION": "0.5",  # one waiting generation takes the replica out
    }, cli=True)
    alive = lambda: server.process.poll() is None  # noqa: E731
    try:
        assert server.get("/readyz").json()["status"] == "ready"
        streams = [StreamReader(server.base_url) for _ in range(STREAMS)]
        for stream in streams:
            stream.start()
        wait_until(lambda: all(s.first_chunk.is_set() for s in streams), FIRST_CHUNK_TIMEOUT_S,
                   "every stream's first chunk", alive=alive)
        ready = server.admin("GET", "/readyz")
        assert ready.status_code == 200, ready.text  # 8 running, none waiting: under the threshold
        assert ready.json()["checks"]["worker"]["running"] == STREAMS
        assert server.get("/healthz").json() == {"status": "ok"}  # busy threads making progress

        queued = QueuedRequest(server.base_url)
        queued.start()
        wait_until(lambda: server.get("/readyz").status_code == 503, 30, "readiness shedding", alive=alive)
        shed = server.admin("GET", "/readyz").json()
        assert shed["status"] == "overloaded" and shed["checks"]["worker"]["waiting"] == 1, shed

        server.process.send_signal(signal.SIGTERM)
        signalled_at = time.monotonic()
        wait_until(lambda: server.get("/readyz").json()["status"] == "draining", DRAIN_TIMEOUT_S,
                   "readiness draining", alive=alive)
        draining = server.admin("GET", "/readyz")
        assert draining.status_code == 503 and draining.json()["checks"]["drain"]["draining"] is True
        refused = server.post("/v1/chat/completions", json=body(True), headers=HEADERS)
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["code"] == "server_shutting_down"
        assert refused.headers["Retry-After"] == "1"
        assert metric(server.metrics(), "guardrail_draining") == 1
        assert server.get("/healthz").status_code == 200  # draining is not a liveness failure

        deadline_s = DRAIN_TIMEOUT_S + EXIT_MARGIN_S
        wait_until(lambda: not alive(), deadline_s, "process exit after SIGTERM")
        for thread in [*streams, queued]:
            thread.join(timeout=max(0.0, deadline_s - (time.monotonic() - signalled_at)))
            assert not thread.is_alive()
    finally:
        server.stop()

    endings = [stream.ending() for stream in streams]
    assert set(endings) <= {"finished", "server_shutting_down"}, endings
    assert queued.response is not None
    queued_aborted = queued.response.status_code == 503
    if queued_aborted:
        assert queued.response.json()["error"]["code"] == "server_shutting_down"
        assert queued.response.headers["Retry-After"] == "1"
    else:  # a stream finished in time and the queued request ran to its end within the drain
        assert queued.response.status_code == 200, queued.response.text
    # Every generation the drain ended is one the clients saw ended, and no other.
    records = [json.loads(line) for line in server.log_path.read_text(errors="replace").splitlines() if line.startswith("{")]
    finished = [r for r in records if r.get("message") == "drain finished"]
    assert len(finished) == 1, [r.get("message") for r in records][-20:]
    assert finished[0]["aborted"] == endings.count("server_shutting_down") + queued_aborted
    assert server.process.returncode == -signal.SIGTERM  # uvicorn re-raises the signal once shut down
