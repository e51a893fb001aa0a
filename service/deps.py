"""Shared FastAPI dependencies: the process's :class:`~service.runtime.Runtime`."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from service.runtime import Runtime


def get_runtime(request: Request) -> Runtime:
    """The runtime the lifespan built (model, stores, worker)."""
    return request.app.state.runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
