"""``POST /v1/completions`` (OpenAI's legacy text completions, streaming and not)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import StreamingResponse

from guardrail.guard.logprobs import TokenLogprob
from service.auth import require_client
from service.deps import RuntimeDep
from service.errors import ApiError
from service.generation import (
    GENERATION_ERRORS,
    ChoiceResult,
    ResponseIdentity,
    guard_headers,
    prepare,
    prompt_token_ids,
    reject_unsupported,
    respond,
)
from service.logprobs import CompletionOffsets
from service.schemas.generation import CompletionRequest, TextCompletion
from service.tenants.access import caller_of

router = APIRouter(prefix="/v1", tags=["generation"], dependencies=[Depends(require_client)])

ENDPOINT = "/v1/completions"


class CompletionShape:
    """text_completion bodies and chunks (a chunk is a text_completion with the new text). With ``logprobs``
    (the request asked), each choice carries the legacy ``logprobs`` object (:mod:`service.logprobs`)."""

    id_prefix = "cmpl"

    def __init__(self, logprobs: bool = False) -> None:
        self.logprobs = logprobs
        self._offsets: dict[int, CompletionOffsets] = {}

    def add_logprobs(self, chunk: dict[str, Any], index: int, records: Sequence[TokenLogprob]) -> None:
        chunk["choices"][0]["logprobs"] = self._offsets.setdefault(index, CompletionOffsets()).logprobs(records)

    @staticmethod
    def _chunk(c: ResponseIdentity, index: int, text: str, reason: str | None, **extra: Any) -> dict[str, Any]:
        choice = {"index": index, "text": text, "logprobs": None, "finish_reason": reason, **extra}
        return {**c.head("text_completion"), "choices": [choice]}

    def first_chunk(self, c: ResponseIdentity, index: int) -> None:
        return None

    def delta_chunks(self, c: ResponseIdentity, index: int, text: str) -> list[dict[str, Any]]:
        return [self._chunk(c, index, text, None)]

    def finish_chunks(self, c: ResponseIdentity, index: int, result: ChoiceResult) -> list[dict[str, Any]]:
        return [self._chunk(c, index, "", result.finish.reason, guardrail=result.guardrail)]

    def usage_chunk(self, c: ResponseIdentity, usage: dict[str, Any]) -> dict[str, Any]:
        return {**c.head("text_completion"), "choices": [], "usage": usage}

    def body(self, c: ResponseIdentity, results: list[ChoiceResult], usage: dict[str, Any]) -> dict[str, Any]:
        return {
            **c.head("text_completion"),
            "choices": [{"index": i, "text": r.finish.text,
                         "logprobs": CompletionOffsets().logprobs(r.logprobs) if self.logprobs else None,
                         "finish_reason": r.finish.reason, "guardrail": r.guardrail} for i, r in enumerate(results)],
            "usage": usage,
        }


@router.post(
    "/completions",
    response_model=TextCompletion,
    responses={200: {"content": {"text/event-stream": {}}, "description": "JSON, or SSE when stream=true"},
               **GENERATION_ERRORS},
    summary="Text completion of a raw prompt with banned terms enforced during decoding",
)
async def create_completion(body: CompletionRequest, request: Request, response: Response,
                            runtime: RuntimeDep) -> StreamingResponse | dict[str, Any]:
    reject_unsupported(body)  # before the prompt is tokenized
    prompt = body.prompt
    if isinstance(prompt, list) and isinstance(prompt[0], int):
        if max(prompt) >= runtime.vocab_size:
            raise ApiError(400, f"prompt token ids must be below {runtime.vocab_size}", param="prompt",
                           code="invalid_value")
        prompt_ids = list(prompt)
    else:
        text = prompt[0] if isinstance(prompt, list) else prompt
        prompt_ids = await prompt_token_ids(runtime, "prompt", prompt=text)
    fields: dict[str, object] = {"endpoint": ENDPOINT, "request_id": request.state.request_id}
    if runtime.settings.debug_log_prompts:
        fields["prompt"] = prompt
    prepared = await prepare(runtime, body, prompt_ids, body.token_limit(), fields, prompt_param="prompt",
                             caller=caller_of(request))
    shape = CompletionShape(logprobs=prepared.generation.params.logprobs is not None)
    answer = await respond(runtime, request, prepared, shape, ENDPOINT)
    if isinstance(answer, dict):
        response.headers.update(guard_headers([c["guardrail"] for c in answer["choices"]]))
    return answer
