"""The service under test, and how it starts.

:func:`start_service_process` and :class:`RedisServer` start separate processes for the tests that need
them (a second replica, a Redis that dies, ``guardrail serve``); the one server shared by the whole session
runs in a thread of the test process (:mod:`helpers.service_fixtures`). Every server loads the real SmolLM2
and uses the real Redis with a key prefix of its own.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import redis
from prometheus_client.parser import text_string_to_metric_families

from helpers.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]
ADMIN_TOKEN = "test-admin-token-0123456789abcdef-xyz"  # GUARDRAIL_ADMIN_TOKEN needs 32+ characters
CLIENT_KEY = "test-client-key"
MODEL = "smollm2"
STARTUP_TIMEOUT_S = 300  # first use on a machine converts the gguf (tens of seconds on 2 cores)
PROMPT = [{"role": "user", "content": "What is the capital of France?"}]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def metric(text: str, name: str, **labels: str) -> float:
    """The value of sample ``name{labels}`` in a /metrics exposition (0 when absent)."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return 0.0


def metric_total(text: str, name: str) -> float:
    """The sum of every sample ``name{...}`` in a /metrics exposition, whatever its labels (0 when absent)."""
    return sum(sample.value for family in text_string_to_metric_families(text) for sample in family.samples
               if sample.name == name)


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


def clean_env(extra: dict[str, str]) -> dict[str, str]:
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


def start_service_process(tmp: Path, env: dict[str, str], cli: bool = False,
                          extra_args: list[str] | None = None) -> ServiceProcess:
    """A service process on a free port: ``guardrail serve`` (``cli=True``, with ``extra_args``) or uvicorn's
    factory."""
    port = free_port()
    if cli:
        args = [sys.executable, "-m", "service.cli.main", "serve", "--host", "127.0.0.1", "--port", str(port),
                *(extra_args or [])]
    else:
        args = [sys.executable, "-m", "uvicorn", "--factory", "service.app:create_app", "--host", "127.0.0.1",
                "--port", str(port), "--no-access-log"]
    env = clean_env({"GUARDRAIL_DATA_DIR": str(tmp / "data"), **env})
    return ServiceProcess(args, env, tmp / f"service-{port}.log", port)


class RedisServer:
    """A redis-server of the test's own on a free port, stoppable by pid: no persistence, or
    (``durable=True``) an append-only file synced before each reply (``appendfsync always``), so that
    a kill loses no acknowledged write."""

    def __init__(self, tmp: Path, durable: bool = False, args: tuple[str, ...] = ()) -> None:
        binary = shutil.which("redis-server")
        assert binary, "redis-server is needed (Debian package redis-server)"
        self.binary, self.tmp, self.port = binary, tmp, free_port()
        self.durable, self.args = durable, list(args)
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        persistence = ["--appendonly", "yes", "--appendfsync", "always"] if self.durable else ["--appendonly", "no"]
        self.process = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", *persistence,
             "--dir", str(self.tmp), *self.args],
            stdout=subprocess.DEVNULL,
        )
        wait_until(lambda: redis.Redis.from_url(self.url, socket_timeout=1).ping(), 10, f"redis on {self.port}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=10)

    def kill(self) -> None:
        """SIGKILL: a crash, nothing flushed beyond what each reply already waited for."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)


@contextmanager
def serve_in_thread(settings) -> Iterator[LiveServer]:
    """``service.app.create_app(settings)`` served by uvicorn in a thread of this process on a free loopback port
    (what the session's shared ``service`` fixture does, for a module that needs other settings)."""
    import threading

    import uvicorn

    from service.app import create_app

    app = create_app(settings)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, access_log=False,
                                           lifespan="on"))
    thread = threading.Thread(target=server.run, name=f"test-service-{port}", daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, STARTUP_TIMEOUT_S, "in-thread service", alive=thread.is_alive)
        yield LiveServer(f"http://127.0.0.1:{port}", app)
    finally:
        server.should_exit = True
        thread.join(timeout=30)
