"""Static checks run with the tests: ruff over the whole tree, mypy over the core, and the core's layering rule."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "guardrail", "service", "bench", "tests"],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_passes_on_the_core():
    # Files and options come from [tool.mypy] in pyproject.toml (files = ["guardrail"]).
    result = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_core_imports_nothing_from_the_service_or_web_stack():
    forbidden = re.compile(r"^\s*(from|import)\s+(service|fastapi|uvicorn|starlette|prometheus_client)\b", re.M)
    offenders = [str(path.relative_to(ROOT)) for path in (ROOT / "guardrail").rglob("*.py")
                 if forbidden.search(path.read_text(encoding="utf-8"))]
    assert offenders == []
