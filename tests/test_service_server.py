"""The service under test, and how it starts.

Also a pytest plugin (``pytest_plugins`` in conftest.py): the ``service`` fixture is one server for the
whole session, uvicorn in a thread of the test process on a free loopback port, so that tests can look
at its runtime (and inject faults into it); :func:`start_service_process` and :class:`RedisServer`
start separate processes for the tests that need them (a second replica, a Redis that dies).
Every server loads the real SmolLM2 and uses the real Redis with a key prefix of its own.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]
ADMIN_TOKEN = "test-admin-token"
CLIENT_KEY = "test-client-key"
MODEL = "smollm2"
STARTUP_TIMEOUT_S = 300  # first use on a machine converts the gguf (tens of seconds on 2 cores)
PROMPT = [{"role": "user", "content": "What is the capital of France?"}]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str,
               alive: Callable[[], bool] = lambda: True, interval_s: float = 0.1) -> None:
    """Poll ``predicate`` until it holds; connection errors count as 'not yet'."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive():
            raise AssertionError(f"{what}: the server died")
        try:
            if predicate():
                return
        except (httpx.HTTPError, OSError, redis.RedisError):
            pass
        time.sleep(interval_s)
    raise AssertionError(f"{what}: not within {timeout_s} s")


def metric(text: str, name: str, **labels: str) -> float:
    """The value of sample ``name{labels}`` in a /metrics exposition (0 when absent)."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return 0.0


def delete_namespace(url: str, namespace: str) -> None:
    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=f"{namespace}*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


class LiveServer:
    """A running service: ``base_url``, plus the in-process ``app`` when it runs in a thread."""

    def __init__(self, base_url: str, app=None) -> None:
        self.base_url = base_url
        self.app = app

    @property
    def runtime(self):
        return self.app.state.runtime

    def get(self, path: str, **kwargs) -> httpx.Response:
        return httpx.get(self.base_url + path, timeout=30, **kwargs)

    def post(self, path: str, **kwargs) -> httpx.Response:
        return httpx.post(self.base_url + path, timeout=120, **kwargs)

    def metrics(self) -> str:
        return self.get("/metrics").text

    def admin(self, method: str, path: str, token: str = ADMIN_TOKEN, **kwargs) -> httpx.Response:
        headers = {**kwargs.pop("headers", {}), "Authorization": f"Bearer {token}"}
        return httpx.request(method, self.base_url + path, headers=headers, timeout=60, **kwargs)

    def chat(self, content: str | None = None, **body) -> httpx.Response:
        messages = PROMPT if content is None else [{"role": "user", "content": content}]
        payload = {"model": MODEL, "messages": messages, "temperature": 0, "max_tokens": 24, **body}
        return self.post("/v1/chat/completions", json=payload, headers={"Authorization": f"Bearer {CLIENT_KEY}"})


def _clean_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GUARDRAIL_")}
    if "GUARDRAIL_CACHE_DIR" in os.environ:  # keep the shared model/artefact cache
        env["GUARDRAIL_CACHE_DIR"] = os.environ["GUARDRAIL_CACHE_DIR"]
    env.update({"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **extra})
    return env


class ServiceProcess(LiveServer):
    """``guardrail serve`` (or uvicorn) in a subprocess; its JSON log goes to ``log_path``."""

    def __init__(self, args: list[str], env: dict[str, str], log_path: Path, port: int) -> None:
        super().__init__(f"http://127.0.0.1:{port}")
        self.log_path = log_path
        self._log = log_path.open("w")
        self.process = subprocess.Popen(args, cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT)
        try:
            wait_until(lambda: self.get("/healthz").status_code == 200, STARTUP_TIMEOUT_S,
                       f"service on port {port}", alive=lambda: self.process.poll() is None, interval_s=0.5)
        except AssertionError as exc:
            self.stop()
            raise AssertionError(f"{exc}\n{self.log_tail()}") from None

    def log_tail(self, chars: int = 4000) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-chars:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


def start_service_process(tmp: Path, env: dict[str, str], cli: bool = False) -> ServiceProcess:
    """A service process on a free port: ``guardrail serve`` (``cli=True``) or uvicorn's factory."""
    port = free_port()
    if cli:
        args = [sys.executable, "-m", "service.cli.main", "serve", "--host", "127.0.0.1", "--port", str(port)]
    else:
        args = [sys.executable, "-m", "uvicorn", "--factory", "service.app:create_app", "--host", "127.0.0.1",
                "--port", str(port), "--no-access-log"]
    env = _clean_env({"GUARDRAIL_DATA_DIR": str(tmp / "data"), **env})
    return ServiceProcess(args, env, tmp / f"service-{port}.log", port)


class RedisServer:
    """A redis-server of the test's own (no persistence) on a free port, stoppable by pid."""

    def __init__(self, tmp: Path) -> None:
        binary = shutil.which("redis-server")
        assert binary, "redis-server is needed (Debian package redis-server)"
        self.binary, self.tmp, self.port = binary, tmp, free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        self.process = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.tmp)],
            stdout=subprocess.DEVNULL,
        )
        wait_until(lambda: redis.Redis.from_url(self.url, socket_timeout=1).ping(), 10, f"redis on {self.port}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=10)


# -- the shared in-thread server -----------------------------------------------------------------------


@pytest.fixture(scope="session")
def service_namespace(redis_url) -> Iterator[str]:
    """The shared server's Redis key prefix (deleted at the end of the session)."""
    namespace = f"guardrail-test:{uuid.uuid4().hex}:"
    yield namespace
    delete_namespace(redis_url, namespace)


@pytest.fixture(scope="session")
def service(redis_url, service_namespace, tmp_path_factory) -> Iterator[LiveServer]:
    """The service in a thread of this process: Redis store, admin token and a client key set, one
    generation at a time with room for one more in the queue (so that a third is refused)."""
    import uvicorn

    from service.app import create_app
    from service.settings import Settings

    settings = Settings(
        model=MODEL,
        redis_url=redis_url,
        redis_prefix=service_namespace,
        admin_token=ADMIN_TOKEN,
        api_keys=[CLIENT_KEY],
        data_dir=tmp_path_factory.mktemp("service-data"),
        max_concurrent=1,
        max_batch=1,
        max_queue=1,
        version_poll_interval_s=0.5,
        default_max_tokens=24,
    )
    app = create_app(settings)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None,
                                           access_log=False, lifespan="on"))
    thread = threading.Thread(target=server.run, name="test-service", daemon=True)
    thread.start()
    wait_until(lambda: server.started, STARTUP_TIMEOUT_S, "in-thread service", alive=thread.is_alive)
    live = LiveServer(f"http://127.0.0.1:{port}", app)
    yield live
    server.should_exit = True
    thread.join(timeout=30)


@pytest.fixture(scope="session")
def openai_client(service):
    from openai import OpenAI

    return OpenAI(base_url=f"{service.base_url}/v1", api_key=CLIENT_KEY, max_retries=0, timeout=120)


# -- tests of starting the service ---------------------------------------------------------------------


@pytest.mark.slow
def test_guardrail_serve_runs_on_a_fresh_machine_with_the_embedded_store(tmp_path):
    """The README's first command: no Redis, no token; bundled lists seeded, admin API off with a hint."""
    server = start_service_process(tmp_path, {}, cli=True)
    try:
        ready = server.get("/readyz")
        assert ready.status_code == 200, ready.text
        assert ready.json()["checks"]["store"] == {"kind": "embedded", "up": True}
        assert ready.json()["wordlists"]["en"] == 1
        check = server.post("/v1/check", json={"text": "what the fuck"})
        assert check.json()["flagged"] is True
        admin = server.admin("GET", "/admin/wordlists")
        assert admin.status_code == 403
        assert "GUARDRAIL_ADMIN_TOKEN" in admin.json()["error"]["message"]
        assert "guardrail_redis_up" not in server.metrics()
        assert '"message": "model loaded"' in server.log_tail(100_000)
    finally:
        server.stop()
    assert (tmp_path / "data" / "wordlists" / "index.json").is_file()


@pytest.mark.slow
def test_the_shared_service_is_ready_with_redis(service):
    ready = service.get("/readyz")
    assert ready.status_code == 200, ready.text
    assert ready.json()["checks"]["store"] == {"kind": "redis", "up": True}
    assert metric(service.metrics(), "guardrail_redis_up") == 1
