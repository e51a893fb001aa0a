"""llama.cpp's real ``llama-server`` on the bundled SmolLM2 GGUF, and ``guardrail serve --engine remote`` in front.

``make llamacpp-test`` builds ``llama-server`` from the llama.cpp sources pinned in requirements-llamacpp.txt
(the ones llama-cpp-python vendors) and installs llama-cpp-python's own server into ``.venv-llamacpp``, then
runs this directory with ``GUARDRAIL_LLAMA_SERVER`` (the binary) and ``GUARDRAIL_LLAMA_CPP_PYTHON`` (that
environment's python) set. Without them every test here is skipped, so ``make test`` leaves them alone.
Both servers run on one thread (a shared machine), only while these tests run.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers.gateway import start_gateway
from helpers.upstream import UpstreamProcess

#: One slot's context: llama-server splits -c over its --parallel slots.
SLOT_CONTEXT = 2048
SLOTS = 2


def _named(variable: str) -> Path | None:
    named = os.environ.get(variable)
    return Path(named) if named and Path(named).exists() else None


def _gguf() -> Path:
    from guardrail.models import resolve_model

    return resolve_model("smollm2").path


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory):
    binary = _named("GUARDRAIL_LLAMA_SERVER")
    if binary is None:
        pytest.skip("GUARDRAIL_LLAMA_SERVER names no llama-server binary (make llamacpp-test sets it)")
    server = UpstreamProcess(
        [str(binary), "-m", str(_gguf()), "--alias", "smollm2", "--host", "127.0.0.1", "--port", "{port}",
         "--threads", "1", "--threads-batch", "1", "--ctx-size", str(SLOT_CONTEXT * SLOTS), "--parallel", str(SLOTS)],
        tmp_path_factory.mktemp("llama-server") / "llama-server.log")
    yield server
    server.kill()


@pytest.fixture
def upstream(llama_server):
    """llama-server, running (started again if a test killed it)."""
    llama_server.ensure_running()
    return llama_server


@pytest.fixture(scope="module")
def gateway(llama_server, tmp_path_factory):
    """``guardrail serve --engine remote`` (tokenizer only, API detected) in front of the session's llama-server."""
    llama_server.ensure_running()
    server = start_gateway(llama_server.url, tmp_path_factory.mktemp("gateway"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def llama_cpp_python_server(tmp_path_factory):
    """llama-cpp-python's own server (``python -m llama_cpp.server``) on the same GGUF."""
    python = _named("GUARDRAIL_LLAMA_CPP_PYTHON")
    if python is None:
        pytest.skip("GUARDRAIL_LLAMA_CPP_PYTHON names no python with llama-cpp-python[server] (make llamacpp-test)")
    server = UpstreamProcess(
        [str(python), "-m", "llama_cpp.server", "--model", str(_gguf()), "--host", "127.0.0.1", "--port", "{port}",
         "--n_threads", "1", "--n_threads_batch", "1", "--n_ctx", str(SLOT_CONTEXT)],
        tmp_path_factory.mktemp("llama-cpp-python") / "server.log", health_path="/v1/models")
    server.ensure_running()
    yield server
    server.kill()


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).parent == here:
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.gateway)
