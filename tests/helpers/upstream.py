"""An inference server in a subprocess for the gateway tests: started on a free port, polled until its
``health_path`` answers 200, killed (SIGKILL to its process group, as a crash would)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import httpx

from helpers.service import free_port
from helpers.wait import wait_until


class UpstreamProcess:
    """``args`` (``{port}`` in them is replaced by a free port) run as a server at ``url``.

    Args:
        health_path: answers 200 once the server can serve (llama-cpp-python's server has no ``/health``).
        startup_timeout_s: the deadline for ``/health`` (a first start on a busy machine), not a speed claim.
        model: the model id requests to it name (``None``: they need none).
    """

    def __init__(self, args: list[str], log_path: Path, env: dict[str, str] | None = None,
                 startup_timeout_s: float = 300, health_path: str = "/health", model: str | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = [a.replace("{port}", str(self.port)) for a in args]
        self.log_path, self.env, self.startup_timeout_s = log_path, env or {}, startup_timeout_s
        self.health_path = health_path
        self.model = model
        self.process: subprocess.Popen | None = None

    def ensure_running(self) -> None:
        if self.process is not None and self.process.poll() is None:
            return
        log = self.log_path.open("a")
        self.process = subprocess.Popen(self.args, env={**os.environ, "HF_HUB_OFFLINE": "1", **self.env}, stdout=log,
                                        stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_until(lambda: httpx.get(self.url + self.health_path, timeout=2).status_code == 200, self.startup_timeout_s,
                       f"{Path(self.args[0]).name} at {self.url}", alive=lambda: self.process.poll() is None,
                       interval_s=0.5)
        except AssertionError as exc:
            self.kill()
            raise AssertionError(f"{exc}\n{self.log_path.read_text(errors='replace')[-3000:]}") from None

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)
