"""What the service benchmarks share: a free port, the service started as its own process, the open-ended
prompts, the chat turn they go in, and the percentiles reported."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
#: Open-ended prompts that ask for a few sentences of harmless text (the service benchmark's; a soak adds
#: prompts that invite hits).
PROMPTS = [
    "Write a short story about a robot who learns to paint.",
    "Describe a sunny day at the beach.",
    "Explain how a bicycle works.",
    "Give me three tips for learning to cook.",
    "Describe the water cycle.",
    "What should I pack for a weekend hiking trip?",
    "Write a short poem about autumn leaves.",
    "Explain why the moon has phases.",
]
#: Seconds the service may take to become ready (the first start converts the bundled GGUF: minutes).
READY_TIMEOUT_S = 300.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_service(data_dir: str, settings: Mapping[str, str] = (), *, log_path: str | None = None,
                  ) -> tuple[subprocess.Popen, str]:
    """Start ``service.app`` under uvicorn on a free port with the embedded store in ``data_dir``.

    ``settings`` are extra ``GUARDRAIL_*`` variables; the caller's other ``GUARDRAIL_*`` variables are dropped
    (``GUARDRAIL_CACHE_DIR`` excepted) so that a benchmark measures the defaults.

    Returns:
        The process and its base URL, once ``/readyz`` answered 200.

    Raises:
        SystemExit: the service exited, or was not ready within :data:`READY_TIMEOUT_S` seconds (it is killed).
    """
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GUARDRAIL_") or k == "GUARDRAIL_CACHE_DIR"}
    env.update({"GUARDRAIL_DATA_DIR": data_dir, "GUARDRAIL_MAX_QUEUE": "16", "GUARDRAIL_LOG_LEVEL": "WARNING"})
    env.update(dict(settings))
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115 - the child keeps it open
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--factory", "service.app:create_app", "--host", "127.0.0.1",
         "--port", str(port), "--no-access-log", "--log-level", "warning"],
        cwd=ROOT, env=env, stdout=out, stderr=out,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the service exited with {process.returncode}")
        try:
            if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                return process, base
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    process.kill()
    raise SystemExit(f"the service did not become ready in {READY_TIMEOUT_S:.0f} s")


def user_turn(text: str) -> list[dict[str, str]]:
    """The chat ``messages`` of one user turn holding ``text``."""
    return [{"role": "user", "content": text}]


def percentiles(values: list[float], digits: int = 3) -> dict[str, float] | None:
    """``{"p50", "p99"}`` of ``values`` (numpy's linear interpolation), rounded to ``digits``; ``None`` for no
    values."""
    if not values:
        return None
    return {"p50": round(float(np.percentile(values, 50)), digits),
            "p99": round(float(np.percentile(values, 99)), digits)}
