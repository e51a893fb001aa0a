"""``guardrail serve --engine remote`` refuses to start without an upstream that answers (no model loaded).

The gateway against a real vLLM server: tests/engines/remote/gateway (``make vllm-test``).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers.service import ROOT, clean_env, free_port

pytestmark = pytest.mark.slow  # the service in a subprocess (tests/conftest.py)


def serve(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "service.cli.main", "serve", "--port", str(free_port()), "--engine", "remote", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env=clean_env({"GUARDRAIL_DATA_DIR": str(tmp_path), "GUARDRAIL_UPSTREAM_RETRIES": "0"}))


def test_the_gateway_refuses_to_start_when_its_upstream_is_down(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    done = serve(tmp_path, "--upstream", url, "--tokenizer", "smollm2")
    assert done.returncode != 0
    assert f"upstream {url} cannot be reached" in done.stdout + done.stderr


def test_the_gateway_needs_an_upstream_url(tmp_path):
    done = serve(tmp_path, "--tokenizer", "smollm2")
    assert done.returncode != 0
    assert "GUARDRAIL_UPSTREAM_URL" in done.stdout + done.stderr
