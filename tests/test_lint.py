"""Static checks run with the tests: ruff over the whole tree, mypy over the core, and the core's layering rule."""

from __future__ import annotations

import re
import subprocess
import sys

from helpers.paths import ROOT


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


#: The core's layers, top to bottom (docs/design.md §1): a module may import from its own unit and from the
#: units in earlier entries only. Leaf utilities first (they import nothing from the core).
CORE_LAYERS = (
    {"atomic_file", "redis_client", "models", "prompts", "sized_cache"},
    {"wordlists"},
    {"matching"},
    {"grammar"},
    {"params"},
    {"guard"},
    {"engines"},
    {"api", "__init__"},
)
#: The engine families are independent: one may use the shared modules of guardrail/engines/, not another
#: family's.
ENGINE_FAMILIES = {"transformers", "vllm", "remote"}
CORE_IMPORT = re.compile(r"^\s*(?:from|import)\s+guardrail\.(\w+)(?:\.(\w+))?", re.M)


def _unit(path):
    parts = path.relative_to(ROOT / "guardrail").with_suffix("").parts
    return parts[0], (parts[1] if len(parts) > 2 else None)


def test_core_layers_import_only_the_layers_above_them():
    rank = {unit: i for i, layer in enumerate(CORE_LAYERS) for unit in layer}
    offenders = []
    for path in sorted((ROOT / "guardrail").rglob("*.py")):
        unit, family = _unit(path)
        assert unit in rank, f"{path.relative_to(ROOT)}: add its unit to CORE_LAYERS"
        for imported, sub in CORE_IMPORT.findall(path.read_text(encoding="utf-8")):
            if imported == unit:
                if unit == "engines" and family and sub in ENGINE_FAMILIES and sub != family:
                    offenders.append(f"{path.relative_to(ROOT)} imports engines.{sub}")
                continue
            if rank[imported] >= rank[unit]:
                offenders.append(f"{path.relative_to(ROOT)} imports guardrail.{imported}")
    assert offenders == []
