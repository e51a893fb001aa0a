"""A real vLLM OpenAI server (``.venv-vllm``) on SmolLM2, and ``guardrail serve --engine remote`` in front of it.

The tests here run with the main environment's python (the guardrail service); the upstream is vLLM's own
server, started once per session from the vLLM environment as a subprocess: the python that
``GUARDRAIL_VLLM_PYTHON`` names (``make vllm-test`` passes ``.venv-vllm/bin/python``). Without it every test
here is skipped, so that ``make test`` leaves them to ``make vllm-test`` and CI runs them once.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers.gateway import start_gateway
from helpers.upstream import UpstreamProcess

VLLM_STARTUP_TIMEOUT_S = 600  # a first start on a busy 2-core machine; usually under a minute


def _vllm_python() -> Path | None:
    named = os.environ.get("GUARDRAIL_VLLM_PYTHON")
    return Path(named) if named and Path(named).exists() else None


@pytest.fixture(scope="session")
def upstream_server(tmp_path_factory):
    """vLLM's OpenAI server in a subprocess (``url``, ``model``; ``kill()`` as a crash would)."""
    python = _vllm_python()
    if python is None:
        pytest.skip("GUARDRAIL_VLLM_PYTHON names no python (make vllm-test sets it)")
    from guardrail.models import model_directory

    model = str(model_directory("smollm2"))
    # As docs/engines.md starts it: float32 (token-identical to the other engines), eager (seconds to start
    # instead of minutes of graph capture on CPU), prefix caching (what makes a rollback cheap).
    server = UpstreamProcess(
        [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--dtype", "float32",
         "--enforce-eager", "--enable-prefix-caching", "--enable-prompt-tokens-details", "--max-model-len", "2048",
         "--block-size", "32", "--host", "127.0.0.1", "--port", "{port}"],
        tmp_path_factory.mktemp("vllm") / "vllm.log",
        env={"VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
             "VLLM_CPU_OMP_THREADS_BIND": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "nobind")},
        startup_timeout_s=VLLM_STARTUP_TIMEOUT_S, model=model)
    yield server
    server.kill()


@pytest.fixture
def upstream(upstream_server):
    """The upstream, running (started again if a test killed it)."""
    upstream_server.ensure_running()
    return upstream_server


@pytest.fixture(scope="module")
def gateway(upstream_server, tmp_path_factory):
    """``guardrail serve --engine remote --upstream URL`` (tokenizer only), in front of the session's upstream,
    banning as on any vLLM server: ``logit_bias`` and a one-token re-pick (``GUARDRAIL_UPSTREAM_LOGITS_PROCESSOR=off``)."""
    upstream_server.ensure_running()
    server = start_gateway(upstream_server.url, tmp_path_factory.mktemp("gateway"),
                           {"GUARDRAIL_UPSTREAM_LOGITS_PROCESSOR": "off"})
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gateway_processor(upstream_server, tmp_path_factory):
    """The same gateway banning through guardrail's vLLM logits processor, which the upstream runs because
    ``.venv-vllm`` has guardrail installed (``GUARDRAIL_UPSTREAM_LOGITS_PROCESSOR=on``: it would refuse to start
    otherwise)."""
    upstream_server.ensure_running()
    server = start_gateway(upstream_server.url, tmp_path_factory.mktemp("gateway-processor"),
                           {"GUARDRAIL_UPSTREAM_LOGITS_PROCESSOR": "on"})
    yield server
    server.stop()


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).parent == here:
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.gateway)
