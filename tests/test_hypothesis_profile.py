"""Hypothesis runs derandomised suite-wide (tests/conftest.py's ``ci`` profile): a failure reproduces locally."""

import ast
import os
from pathlib import Path

import pytest
from hypothesis import settings

TESTS = Path(__file__).parent


@pytest.mark.skipif(os.environ.get("HYPOTHESIS_PROFILE", "ci") != "ci", reason="another profile was asked for")
def test_the_ci_profile_is_loaded():
    assert settings.default.derandomize is True
    assert settings.default.database is None


def _settings_calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in ("settings", "register_profile"):
                yield node


def test_no_module_re_randomises():
    """No ``@settings(derandomize=False)`` or own ``database=`` below the profile (the profile's ``dev`` entry
    in conftest.py is the one opt-in)."""
    offenders = []
    for path in sorted(TESTS.rglob("*.py")):
        if path.name == "conftest.py" and path.parent == TESTS:
            continue
        for call in _settings_calls(ast.parse(path.read_text(encoding="utf-8"))):
            for keyword in call.keywords:
                if keyword.arg == "derandomize" and not (isinstance(keyword.value, ast.Constant)
                                                         and keyword.value.value is True):
                    offenders.append(f"{path.relative_to(TESTS)}:{call.lineno} derandomize")
                if keyword.arg in ("database", "seed"):
                    offenders.append(f"{path.relative_to(TESTS)}:{call.lineno} {keyword.arg}")
    assert offenders == []
