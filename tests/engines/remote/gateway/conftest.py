"""A real vLLM OpenAI server (``.venv-vllm``) on SmolLM2, and ``guardrail serve --engine remote`` in front of it.

The tests here run with the main environment's python (the guardrail service); the upstream is vLLM's own
server, started once per session from the vLLM environment as a subprocess: the python that
``GUARDRAIL_VLLM_PYTHON`` names (``make vllm-test`` passes ``.venv-vllm/bin/python``). Without it every test
here is skipped, so that ``make test`` leaves them to ``make vllm-test`` and CI runs them once.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import httpx
import pytest
from helpers.service import free_port, start_service_process
from helpers.wait import wait_until

VLLM_STARTUP_TIMEOUT_S = 600  # a first start on a busy 2-core machine; usually under a minute


def _vllm_python() -> Path | None:
    named = os.environ.get("GUARDRAIL_VLLM_PYTHON")
    return Path(named) if named and Path(named).exists() else None


class Upstream:
    """vLLM's OpenAI server in a subprocess: ``url``; :meth:`kill` and :meth:`ensure_running` (same port)."""

    def __init__(self, python: Path, model_dir: Path, log_path: Path) -> None:
        self.python, self.model_dir, self.log_path = python, model_dir, log_path
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def ensure_running(self) -> None:
        if self.process is not None and self.process.poll() is None:
            return
        env = {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
               **os.environ}
        # As docs/engines.md starts it: float32 (token-identical to the other engines), eager (seconds to start
        # instead of minutes of graph capture on CPU), prefix caching (what makes a rollback cheap).
        args = [str(self.python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(self.model_dir),
                "--dtype", "float32", "--enforce-eager", "--enable-prefix-caching", "--enable-prompt-tokens-details", "--max-model-len", "2048",
                "--block-size", "32", "--host", "127.0.0.1", "--port", str(self.port)]
        log = self.log_path.open("a")
        self.process = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_until(lambda: httpx.get(f"{self.url}/health", timeout=2).status_code == 200, VLLM_STARTUP_TIMEOUT_S,
                       "vLLM's OpenAI server", alive=lambda: self.process.poll() is None, interval_s=0.5)
        except AssertionError as exc:
            self.kill()
            raise AssertionError(f"{exc}\n{self.log_path.read_text(errors='replace')[-3000:]}") from None

    def kill(self) -> None:
        """SIGKILL the server's process group (the API server and its engine-core process), as a crash would."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)


@pytest.fixture(scope="session")
def upstream_server(tmp_path_factory):
    python = _vllm_python()
    if python is None:
        pytest.skip("GUARDRAIL_VLLM_PYTHON names no python (make vllm-test sets it)")
    from guardrail.models import model_directory

    server = Upstream(python, model_directory("smollm2"), tmp_path_factory.mktemp("vllm") / "vllm.log")
    yield server
    server.kill()


@pytest.fixture
def upstream(upstream_server):
    """The upstream, running (started again if a test killed it)."""
    upstream_server.ensure_running()
    return upstream_server


@pytest.fixture(scope="module")
def gateway(upstream_server, tmp_path_factory):
    """``guardrail serve --engine remote --upstream URL`` (tokenizer only), in front of the session's upstream."""
    upstream_server.ensure_running()
    tmp = tmp_path_factory.mktemp("gateway")
    server = start_service_process(tmp, {"GUARDRAIL_UPSTREAM_HEALTH_INTERVAL_S": "0.2",
                                         "GUARDRAIL_WORDLISTS": "en"}, cli=True, extra_args=[
        "--engine", "remote", "--upstream", upstream_server.url, "--tokenizer", "smollm2"])
    wait_until(lambda: server.get("/readyz").json()["checks"]["engine"]["up"], 60, "gateway ready",
               alive=lambda: server.process.poll() is None)
    yield server
    server.stop()


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).parent == here:
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.gateway)

