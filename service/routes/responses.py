"""``POST /v1/responses`` (OpenAI's Responses API, text in and out, streaming and not), translated onto the
chat path: ``instructions`` becomes the system turn, ``input`` (a string or messages) the other turns,
``max_output_tokens`` the token limit. Nothing is stored (``store`` is ignored, ``previous_response_id`` is
refused); tools are not offered on this endpoint yet (use chat completions)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from guardrail.guard.events import Finish, Rollback, TextDelta
from service.auth import require_client
from service.deps import RuntimeDep
from service.errors import ApiError, error_body
from service.generation import (
    GENERATION_ERRORS,
    SHUTTING_DOWN,
    SSE_KEEPALIVE,
    ChoiceEvent,
    ChoiceResult,
    GuardRecord,
    Prepared,
    ResponseIdentity,
    UsageTotal,
    guard_headers,
    prepare,
    prepend,
    prompt_token_ids,
    respond,
    sse_event,
    with_keepalive,
)
from service.schemas.generation import GenerationFields
from service.schemas.text import Text
from service.tenants.access import caller_of
from service.worker import GenerationFailed, GenerationRejected, Job, ServerShuttingDown

router = APIRouter(prefix="/v1", tags=["generation"], dependencies=[Depends(require_client)])

ENDPOINT = "/v1/responses"
#: Responses fields that change the answer and are not implemented here: refused with 400 naming them.
_REFUSED = ("previous_response_id", "tools", "conversation", "prompt", "background")
#: Why a response is incomplete, by finish_reason (OpenAI's ``incomplete_details.reason`` values).
_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


class InputText(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["input_text", "output_text", "text"]
    text: Text


class InputMessage(BaseModel):
    """One message of ``input`` (``{"role", "content"}``, ``type: "message"`` optional)."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["message"] = "message"
    role: Literal["system", "developer", "user", "assistant"]
    content: Text | list[InputText]

    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(part.text for part in self.content)


class ResponsesRequest(GenerationFields):
    """The Responses API's request; the sampling fields and this service's extensions (``banned_terms``,
    ``wordlists`` …) are those of chat completions."""

    input: Text | Annotated[list[InputMessage], Field(min_length=1)] = Field(
        description="A user message's text, or messages.")
    instructions: Text | None = Field(None, description="A system message put before the input.")
    max_output_tokens: int | None = Field(None, ge=1, description="Completion token limit.")
    text: dict[str, Any] | None = Field(None, description='Output options: only {"format": {"type": "text"}}.')
    n: Literal[1] = 1

    def messages(self) -> list[dict[str, str]]:
        turns = [{"role": "user", "content": self.input}] if isinstance(self.input, str) else [
            {"role": "system" if m.role == "developer" else m.role, "content": m.text()} for m in self.input]
        if self.instructions:
            turns.insert(0, {"role": "system", "content": self.instructions})
        return turns


def _usage(usage: dict[str, Any]) -> dict[str, Any]:
    """The Responses API's usage from chat usage (the guard's counters kept as extensions)."""
    extra = {k: v for k, v in usage.items()
             if k not in ("prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details")}
    return {"input_tokens": usage["prompt_tokens"], "output_tokens": usage["completion_tokens"],
            "total_tokens": usage["total_tokens"],
            "input_tokens_details": {"cached_tokens": usage["prompt_tokens_details"]["cached_tokens"]},
            "output_tokens_details": {"reasoning_tokens": 0}, **extra}


class ResponsesShape:
    """``response`` objects; its stream events are written by :func:`response_events`."""

    id_prefix = "resp"

    def __init__(self, body: ResponsesRequest) -> None:
        self.request = body
        self.message_id = f"msg_{uuid.uuid4().hex}"

    def response(self, c: ResponseIdentity, status: str, text: str | None = None,
                 finish: ChoiceResult | None = None, usage: dict[str, Any] | None = None) -> dict[str, Any]:
        reason = finish.finish.reason if finish is not None else None
        output = [] if text is None else [self.message(text, "completed" if status == "completed" else status)]
        return {
            "id": c.id, "object": "response", "created_at": c.created, "model": c.model, "status": status,
            "instructions": self.request.instructions, "max_output_tokens": self.request.max_output_tokens,
            "temperature": self.request.temperature, "top_p": self.request.top_p, "output": output,
            "incomplete_details": {"reason": _INCOMPLETE[reason]} if reason in _INCOMPLETE else None,
            "error": None, "parallel_tool_calls": False, "tool_choice": "none", "tools": [], "text": {
                "format": {"type": "text"}}, "truncation": "disabled", "store": False,
            "usage": _usage(usage) if usage is not None else None,
            "guardrail": finish.guardrail if finish is not None else None,
        }

    def message(self, text: str, status: str) -> dict[str, Any]:
        return {"type": "message", "id": self.message_id, "status": status, "role": "assistant",
                "content": [self.part(text)]}

    @staticmethod
    def part(text: str) -> dict[str, Any]:
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}

    # -- ResponseShape (only body is used: the stream has its own writer) ---------------------------------
    def first_chunk(self, c: ResponseIdentity, index: int) -> None:
        return None

    def delta_chunks(self, c: ResponseIdentity, index: int, text: str) -> list[dict[str, Any]]:
        return []

    def finish_chunks(self, c: ResponseIdentity, index: int, result: ChoiceResult) -> list[dict[str, Any]]:
        return []

    def usage_chunk(self, c: ResponseIdentity, usage: dict[str, Any]) -> dict[str, Any]:
        return {}

    def body(self, c: ResponseIdentity, results: list[ChoiceResult], usage: dict[str, Any]) -> dict[str, Any]:
        [result] = results
        status = "incomplete" if result.finish.reason in _INCOMPLETE else "completed"
        return self.response(c, status, result.finish.text, result, usage)


async def response_events(first: ChoiceEvent, events: AsyncIterator[ChoiceEvent], shape: Any,
                          c: ResponseIdentity, prepared: Prepared, first_text: Callable[[], None],
                          job: Job) -> AsyncIterator[str]:
    """The Responses API's SSE: ``response.created``, ``response.in_progress``, the output item and its part
    added, one ``response.output_text.delta`` per released text, the text, part and item done, then
    ``response.completed`` (or ``response.incomplete``) with usage. A failure after the start becomes an
    ``error`` event. No ``[DONE]``: the Responses API ends with the terminal event."""
    assert isinstance(shape, ResponsesShape)
    sequence = 0

    def event(kind: str, **fields: Any) -> str:
        nonlocal sequence
        sequence += 1
        payload = {"type": kind, "sequence_number": sequence - 1, **fields}
        return f"event: {kind}\n" + sse_event(payload)

    where = {"item_id": shape.message_id, "output_index": 0, "content_index": 0}
    text, record = "", GuardRecord()
    try:
        yield event("response.created", response=shape.response(c, "in_progress"))
        yield event("response.in_progress", response=shape.response(c, "in_progress"))
        yield event("response.output_item.added", output_index=0, item={
            "type": "message", "id": shape.message_id, "status": "in_progress", "role": "assistant", "content": []})
        yield event("response.content_part.added", item_id=shape.message_id, output_index=0, content_index=0,
                    part=shape.part(""))
        try:
            async for item in with_keepalive(prepend(first, events), prepared.keepalive_s):
                if item is None:
                    yield SSE_KEEPALIVE
                elif isinstance(item.event, TextDelta) and item.event.text:
                    if not text:
                        first_text()
                    text += item.event.text
                    yield event("response.output_text.delta", **where, delta=item.event.text, logprobs=[])
                elif isinstance(item.event, Rollback):
                    record.add(item.event)
                elif isinstance(item.event, Finish):
                    finish = item.event
                    result = ChoiceResult(finish, record.to_dict(finish))
                    status = "incomplete" if finish.reason in _INCOMPLETE else "completed"
                    yield event("response.output_text.done", **where, text=finish.text, logprobs=[])
                    yield event("response.content_part.done", **where, part=shape.part(finish.text))
                    yield event("response.output_item.done", output_index=0, item=shape.message(finish.text, status))
                    total = UsageTotal()
                    total.add(finish.usage)
                    yield event(f"response.{status}",
                                response=shape.response(c, status, finish.text, result, total.to_dict()))
        except ServerShuttingDown as exc:  # the drain deadline passed (service/drain.py)
            body = error_body(str(exc), status=503, code=SHUTTING_DOWN)["error"]
            yield event("error", code=body["code"], message=body["message"], param=None)
        except (GenerationFailed, GenerationRejected) as exc:
            body = error_body(str(exc), status=500, code="generation_failed")["error"]
            yield event("error", code=body["code"], message=body["message"], param=None)
    finally:
        job.cancel.set()


@router.post(
    "/responses",
    response_model=None,  # OpenAI's Response object (built by ResponsesShape), not described field by field here
    responses={200: {"content": {"text/event-stream": {}}, "description": "a response object, or SSE events when "
                     "stream=true"}, **GENERATION_ERRORS},
    summary="Responses API (text) with banned terms enforced during decoding",
)
async def create_response(body: ResponsesRequest, request: Request, response: Response,
                          runtime: RuntimeDep) -> StreamingResponse | dict[str, Any]:
    for name in _REFUSED:
        if (body.model_extra or {}).get(name) not in (None, [], "", False):
            raise ApiError(400, f"{name} is not supported on /v1/responses", param=name, code="unsupported_parameter")
    text_format = (body.text or {}).get("format") or {}
    if not isinstance(text_format, dict) or text_format.get("type", "text") != "text":
        raise ApiError(400, "only text output is supported", param="text.format", code="unsupported_parameter")
    messages = body.messages()
    prompt_ids = await prompt_token_ids(runtime, "input", messages=messages)
    fields: dict[str, object] = {"endpoint": ENDPOINT, "request_id": request.state.request_id}
    if runtime.settings.debug_log_prompts:
        fields["prompt"] = messages
    prepared = prepare(runtime, body, prompt_ids, body.max_output_tokens or body.max_tokens, fields,
                       prompt_param="input", caller=caller_of(request))
    answer = await respond(runtime, request, prepared, ResponsesShape(body), ENDPOINT, response_events)
    if isinstance(answer, dict):
        response.headers.update(guard_headers([answer["guardrail"]]))
    return answer
