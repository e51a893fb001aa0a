"""``POST /v1/watermark/detect``: is a text watermarked by this service (``"watermark": true``)?"""

from __future__ import annotations

from fastapi import APIRouter, Depends

from guardrail.engines.transformers.watermark import detect_watermark
from service.auth import require_client
from service.deps import RuntimeDep
from service.errors import ApiError
from service.schemas.watermark import WatermarkDetectRequest, WatermarkDetectResponse

router = APIRouter(prefix="/v1", tags=["watermark"], dependencies=[Depends(require_client)])


@router.post("/watermark/detect", response_model=WatermarkDetectResponse, summary="Detect the watermark")
def detect(body: WatermarkDetectRequest, runtime: RuntimeDep) -> WatermarkDetectResponse:
    """Score the green-list watermark (Kirchenbauer et al. 2023) with the served model's vocab and the
    server's key (``GUARDRAIL_WATERMARK_KEY``). 400 naming the engine when it does not know the model's config
    (the remote engine: :attr:`~guardrail.engines.base.EngineCapabilities.model_config`)."""
    model_config = runtime.model_config
    param = "token_ids" if body.token_ids is not None else "text"
    if model_config is None:
        raise ApiError(400, f"watermark detection needs the model config; engine {runtime.engine.name!r} does not "
                       "provide it (docs/engines.md)", param=param, code="unsupported_engine")
    if body.token_ids is not None:
        if body.token_ids and max(body.token_ids) >= runtime.vocab_size:
            raise ApiError(400, f"token ids must be below {runtime.vocab_size}", param="token_ids",
                           code="invalid_value")
        ids, param = body.token_ids, "token_ids"
    else:
        ids, param = runtime.tokenizer.encode(body.text or "", add_special_tokens=False), "text"
    try:
        verdict = detect_watermark(ids, model_config, hashing_key=runtime.settings.watermark_key,
                                   z_threshold=body.z_threshold)
    except ValueError as exc:
        raise ApiError(400, str(exc), param=param, code="invalid_value") from None
    return WatermarkDetectResponse(
        prediction=verdict.detected, z_score=verdict.z_score, p_value=verdict.p_value,
        green_fraction=verdict.green_fraction, tokens_scored=verdict.tokens_scored, z_threshold=body.z_threshold,
    )
