"""Faults injected into the real service, for the tests that check what a client sees when one happens."""

from __future__ import annotations

from typing import Any

import pytest

#: The message of every injected fault; a client must never see it (internals stay in the log).
FAULT_MESSAGE = "injected fault"


def fail_forward_after(monkeypatch: pytest.MonkeyPatch, model: Any, passes: int) -> None:
    """Make ``model.forward`` raise ``RuntimeError(FAULT_MESSAGE)`` from its ``passes + 1``-th call on, so that
    a generation fails mid-stream (the prefill and a few decode steps run first). ``monkeypatch`` undoes it."""
    original, calls = model.forward, []

    def fails_after_a_few_passes(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) > passes:
            raise RuntimeError(FAULT_MESSAGE)
        return original(*args, **kwargs)

    monkeypatch.setattr(model, "forward", fails_after_a_few_passes)
