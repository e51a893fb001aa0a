"""``GET /v1/models``: the one model this process serves."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from service.auth import require_client
from service.deps import RuntimeDep
from service.errors import ApiError
from service.runtime import Runtime
from service.schemas.envelope import ListOf

router = APIRouter(prefix="/v1", tags=["models"], dependencies=[Depends(require_client)])


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "guardrail"
    root: str = Field(description="The model the id stands for (vLLM's field).")
    max_model_len: int = Field(description="The model's context length, tokens (prompt plus completion; vLLM's field).")


class ModelList(ListOf[ModelCard]):
    pass


def _card(runtime: Runtime) -> ModelCard:
    return ModelCard(id=runtime.model_id, created=runtime.started_at, root=runtime.settings.model,
                     max_model_len=runtime.context_length)


@router.get("/models", response_model=ModelList)
def list_models(runtime: RuntimeDep) -> ModelList:
    return ModelList(data=[_card(runtime)])


@router.get("/models/{model}", response_model=ModelCard)
def get_model(model: str, runtime: RuntimeDep) -> ModelCard:
    if model != runtime.model_id:
        raise ApiError(404, f"model {model!r} is not served here", param="model", code="model_not_found")
    return _card(runtime)
