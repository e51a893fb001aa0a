"""``POST /v1/chat/completions`` (OpenAI's chat completions, streaming and not)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import StreamingResponse

from guardrail.guard.events import Finish
from service.auth import require_client
from service.deps import RuntimeDep
from service.generation import (
    GENERATION_ERRORS,
    ResponseIdentity,
    prepare,
    prompt_token_ids,
    reject_unsupported,
    respond,
)
from service.schemas.generation import ChatCompletion, ChatCompletionRequest

router = APIRouter(prefix="/v1", tags=["generation"], dependencies=[Depends(require_client)])

ENDPOINT = "/v1/chat/completions"


class ChatShape:
    """chat.completion bodies and chat.completion.chunk events."""

    id_prefix = "chatcmpl"

    @staticmethod
    def _chunk(c: ResponseIdentity, index: int, delta: dict[str, Any], reason: str | None) -> dict[str, Any]:
        return {"id": c.id, "object": "chat.completion.chunk", "created": c.created, "model": c.model,
                "choices": [{"index": index, "delta": delta, "logprobs": None, "finish_reason": reason}]}

    def first_chunk(self, c: ResponseIdentity, index: int) -> dict[str, Any]:
        return self._chunk(c, index, {"role": "assistant", "content": ""}, None)

    def delta_chunk(self, c: ResponseIdentity, index: int, text: str) -> dict[str, Any]:
        return self._chunk(c, index, {"content": text}, None)

    def finish_chunk(self, c: ResponseIdentity, index: int, reason: str) -> dict[str, Any]:
        return self._chunk(c, index, {}, reason)

    def usage_chunk(self, c: ResponseIdentity, usage: dict[str, Any]) -> dict[str, Any]:
        return {"id": c.id, "object": "chat.completion.chunk", "created": c.created, "model": c.model,
                "choices": [], "usage": usage}

    def body(self, c: ResponseIdentity, finishes: list[Finish], usage: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": c.id, "object": "chat.completion", "created": c.created, "model": c.model,
            "choices": [{"index": i, "message": {"role": "assistant", "content": f.text}, "logprobs": None,
                         "finish_reason": f.reason} for i, f in enumerate(finishes)],
            "usage": usage,
        }


@router.post(
    "/chat/completions",
    response_model=ChatCompletion,
    responses={200: {"content": {"text/event-stream": {}}, "description": "JSON, or SSE when stream=true"},
               **GENERATION_ERRORS},
    summary="Chat completion with banned terms enforced during decoding",
)
async def create_chat_completion(body: ChatCompletionRequest, request: Request,
                                 runtime: RuntimeDep) -> StreamingResponse | dict[str, Any]:
    reject_unsupported(body)  # before the prompt is tokenized
    # "developer" is OpenAI's newer name for the system role.
    messages = [{"role": "system" if m.role == "developer" else m.role, "content": m.text()} for m in body.messages]
    prompt_ids = await prompt_token_ids(runtime, "messages", messages=messages)
    fields: dict[str, object] = {"endpoint": ENDPOINT, "request_id": request.state.request_id}
    if runtime.settings.debug_log_prompts:
        fields["prompt"] = messages
    prepared = prepare(runtime, body, prompt_ids, body.token_limit(), fields, prompt_param="messages")
    return await respond(runtime, request, prepared, ChatShape(), ENDPOINT)
