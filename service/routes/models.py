"""``GET /v1/models``: the one model this process serves."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends
from pydantic import BaseModel

from service.auth import require_client
from service.deps import RuntimeDep
from service.errors import ApiError

router = APIRouter(prefix="/v1", tags=["models"], dependencies=[Depends(require_client)])


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "guardrail"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


@router.get("/models", response_model=ModelList)
def list_models(runtime: RuntimeDep) -> ModelList:
    return ModelList(data=[ModelCard(id=runtime.model_id, created=runtime.started_at)])


@router.get("/models/{model}", response_model=ModelCard)
def get_model(model: str, runtime: RuntimeDep) -> ModelCard:
    if model != runtime.model_id:
        raise ApiError(404, f"model {model!r} is not served here", param="model", code="model_not_found")
    return ModelCard(id=runtime.model_id, created=runtime.started_at)
