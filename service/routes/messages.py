"""``POST /v1/messages`` (Anthropic's Messages API, streaming and not, tools included), translated onto the chat
path (:mod:`service.generation`, as ``/v1/responses`` is): ``system`` becomes the system turn, ``tool_use`` and
``tool_result`` blocks the turns' ``tool_calls`` and ``tool`` turns, ``tools`` OpenAI function tools rendered by
the chat template and read back by :mod:`service.tool_calls`.

Errors are answered in Anthropic's shape ``{"type": "error", "error": {"type", "message", "param"}}`` (``param``
is this service's extension naming the field) by the router's route class, so that the ``anthropic`` client
raises its own exception classes. The API key is read from ``x-api-key`` (Anthropic's header) or
``Authorization: Bearer``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException

from guardrail.guard.events import Finish
from service.auth import require_client
from service.chat_prompt import chat_template_for, prepare_chat
from service.deps import RuntimeDep
from service.errors import ApiError, validation_response
from service.event_stream import Finished, KeepAlive, Output, OwnStreamShape, answer_items
from service.generation import (
    ChoiceEvent,
    ChoiceResult,
    Prepared,
    ResponseIdentity,
    guard_headers,
    prompt_token_ids,
    reject_unsupported,
    respond,
    structured_output_of,
)
from service.runtime import Runtime
from service.schemas.messages import (
    STOP_REASONS,
    AnthropicError,
    CountTokensRequest,
    MessageResponse,
    MessagesRequest,
    chat_turns,
    tool_input,
)
from service.tool_calls import ToolCall, ToolCallPiece, parse_answer
from service.tool_choice import Mode, ToolUse, tool_use
from service.worker import GenerationFailed, GenerationRejected, Job, ServerShuttingDown

ENDPOINT = "/v1/messages"
#: Anthropic's ``error.type`` by HTTP status (its API reference, "Errors"); other 5xx are ``api_error``.
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
               503: "overloaded_error", 529: "overloaded_error"}
_PING = 'event: ping\ndata: {"type":"ping"}\n\n'


def error_type(status: int) -> str:
    return ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def error_body(status: int, message: str, param: str | None = None) -> dict[str, Any]:
    """Anthropic's error body (also the payload of a stream's ``error`` event)."""
    return {"type": "error", "error": {"type": error_type(status), "message": message, "param": param}}


class AnthropicErrorRoute(APIRoute):
    """Answers the errors of its endpoint (the OpenAI-shaped :class:`ApiError` and validation errors raised in the
    route or its dependencies) in Anthropic's shape, with the same status and headers."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                return await handler(request)
            except ApiError as exc:
                return JSONResponse(error_body(exc.status, exc.message, exc.param), exc.status, headers=exc.headers)
            except RequestValidationError as exc:
                # The message and field of the service's own validation answer (one wording for every route).
                body = json.loads(bytes(validation_response(exc).body))["error"]
                return JSONResponse(error_body(400, body["message"], body["param"]), 400)
            except HTTPException as exc:  # FastAPI's own, before the body is validated: a body that is not JSON
                return JSONResponse(error_body(exc.status_code, str(exc.detail)), exc.status_code, headers=exc.headers)

        return route


_bearer = HTTPBearer(auto_error=False, scheme_name="ApiKey")


def require_anthropic_client(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    x_api_key: Annotated[str | None, Header(description="The API key, as Anthropic's clients send it.")] = None,
) -> None:
    """:func:`service.auth.require_client` with the key from ``x-api-key`` when no bearer token is given."""
    if credentials is None and x_api_key:
        credentials = HTTPAuthorizationCredentials(scheme="Bearer", credentials=x_api_key)
    require_client(request, credentials)


router = APIRouter(prefix="/v1", tags=["generation"], route_class=AnthropicErrorRoute,
                   dependencies=[Depends(require_anthropic_client)])


def _tool_use(runtime: Runtime, body: MessagesRequest) -> ToolUse | None:
    """How the answer is made and read for calls (``tool_choice``: ``any`` is OpenAI's ``required``, ``tool`` a
    named function; None: no tools, or ``none``).

    Raises:
        ApiError: 400 naming ``tool_choice`` when it needs tools the request does not give.
    """
    choice = body.tool_choice
    if choice is not None and choice.type in ("any", "tool") and not body.tools:
        raise ApiError(400, f"tool_choice {choice.type!r} needs tools", param="tool_choice")
    if choice is not None and choice.type == "tool":
        if not choice.name:
            raise ApiError(400, "tool_choice of type 'tool' needs a name", param="tool_choice.name")
        if choice.name not in {t.name for t in body.tools or ()}:
            raise ApiError(400, f"tool_choice names tool {choice.name!r}, which is not in tools",
                           param="tool_choice.name")
    if not body.tools or (choice is not None and choice.type == "none"):
        return None
    single = bool(choice is not None and choice.disable_parallel_tool_use)
    kind = choice.type if choice is not None else "auto"
    mode: Mode = "named" if kind == "tool" else "required" if kind == "any" else "auto"
    return tool_use(runtime, [t.function() for t in body.tools], mode, choice.name if choice is not None else None,
                    single, text_format=structured_output_of(runtime, body),
                    schema_param=lambda i: f"tools.{i}.input_schema")


def _tool_use_block(call: ToolCall) -> dict[str, Any]:
    return {"type": "tool_use", "id": "toolu_" + call.id.removeprefix("call_"), "name": call.name,
            "input": tool_input(call.arguments)}


class MessagesShape(OwnStreamShape):
    """``message`` objects; the stream is written by :func:`message_events`."""

    id_prefix = "msg"

    def __init__(self, runtime: Runtime, body: MessagesRequest, tools: ToolUse | None, prompt_tokens: int) -> None:
        self.runtime = runtime
        self.request = body
        self.tools = tools
        self.prompt_tokens = prompt_tokens
        self.id = f"msg_{uuid.uuid4().hex}"

    def stopped_by(self, finish: Finish) -> str | None:
        """The stop sequence that ended the answer, if one did: the kept token ids reach into it (the token that
        completed it is kept, its text cut), so their decoded text goes on with it. EOS is not decoded."""
        stops = self.request.stop_list()
        if finish.reason != "stop" or not stops or not finish.token_ids:
            return None
        decoded = str(self.runtime.tokenizer.decode(list(finish.token_ids), skip_special_tokens=True))
        rest = decoded[len(finish.text):] if decoded.startswith(finish.text) else ""
        return next((s for s in stops if rest.startswith(s)), None)

    def stop(self, finish: Finish, called: bool) -> tuple[str, str | None]:
        """``stop_reason`` and ``stop_sequence`` (:data:`STOP_REASONS`)."""
        sequence = self.stopped_by(finish)
        if sequence is not None:
            return "stop_sequence", sequence
        if called and finish.reason == "stop":
            return "tool_use", None
        return STOP_REASONS.get(finish.reason, "end_turn"), None

    def usage(self, output_tokens: int, result: ChoiceResult | None = None) -> dict[str, Any]:
        finish = result.finish if result is not None else None
        return {"input_tokens": self.prompt_tokens, "output_tokens": output_tokens,
                "cache_read_input_tokens": finish.usage.cached_tokens if finish is not None else 0,
                "cache_creation_input_tokens": 0, "rollbacks": finish.usage.rollbacks if finish is not None else 0}

    def message(self, content: list[dict[str, Any]], stop_reason: str | None, stop_sequence: str | None,
                usage: dict[str, Any], guardrail: dict[str, Any] | None) -> dict[str, Any]:
        return {"id": self.id, "type": "message", "role": "assistant", "content": content,
                "model": self.runtime.model_id, "stop_reason": stop_reason, "stop_sequence": stop_sequence,
                "usage": usage, "guardrail": guardrail}

    def body(self, c: ResponseIdentity, results: list[ChoiceResult], usage: dict[str, Any]) -> dict[str, Any]:
        [result] = results
        text: str | None = result.finish.text
        calls: list[ToolCall] = []
        if self.tools is not None:
            text, calls = parse_answer(self.tools.parser, result.finish.text)
            calls = self.tools.limit(calls)
        content = [{"type": "text", "text": text}] if text or not calls else []
        content += [_tool_use_block(call) for call in calls]
        reason, sequence = self.stop(result.finish, bool(calls))
        return self.message(content, reason, sequence, self.usage(result.finish.usage.completion_tokens, result),
                            result.guardrail)


def sse(kind: str, payload: dict[str, Any]) -> str:
    """One named event (Anthropic's streams name every event as its ``type``)."""
    return f"event: {kind}\ndata: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")) + "\n\n"


async def message_events(first: ChoiceEvent, events: AsyncIterator[ChoiceEvent], shape: Any, c: ResponseIdentity,
                         prepared: Prepared, first_text: Callable[[], None], job: Job) -> AsyncIterator[str]:
    """Anthropic's SSE: ``message_start``, ``ping``, per content block ``content_block_start``, its deltas
    (``text_delta``; a tool call's block starts once its name is known, then one ``input_json_delta`` per
    released fragment of its input's JSON) and
    ``content_block_stop``, then ``message_delta`` (``stop_reason``, ``stop_sequence``, usage and the guard's
    record) and ``message_stop``. ``ping`` also keeps an idle connection alive while the guard holds text back.
    A failure after the start becomes an ``error`` event (Anthropic's error body) and the stream ends."""
    assert isinstance(shape, MessagesShape)
    blocks = 0
    text_open = False
    tool_open = False  # a tool_use block whose input is still streaming

    def open_text() -> list[str]:
        nonlocal text_open
        text_open = True
        return [sse("content_block_start", {"type": "content_block_start", "index": blocks,
                                            "content_block": {"type": "text", "text": ""}})]

    def close_text() -> list[str]:
        nonlocal text_open, blocks
        text_open = False
        blocks += 1
        return [sse("content_block_stop", {"type": "content_block_stop", "index": blocks - 1})]

    def emit(output: Output) -> list[str]:
        nonlocal blocks
        out: list[str] = []
        if output.text:
            if not text_open:
                out += open_text()
            out.append(sse("content_block_delta", {"type": "content_block_delta", "index": blocks,
                                                   "delta": {"type": "text_delta", "text": output.text}}))
        for piece in output.pieces:
            out += tool_events(piece)
        return out

    def tool_events(piece: ToolCallPiece) -> list[str]:
        nonlocal blocks, tool_open
        out: list[str] = []
        if piece.first:
            if text_open:
                out += close_text()
            tool_open = True
            block = _tool_use_block(ToolCall(piece.name, "{}", piece.id))
            out.append(sse("content_block_start", {"type": "content_block_start", "index": blocks,
                                                   "content_block": {**block, "input": {}}}))
        if piece.arguments:
            out.append(sse("content_block_delta", {"type": "content_block_delta", "index": blocks, "delta": {
                "type": "input_json_delta", "partial_json": piece.arguments}}))
        if piece.done is not None:
            out += close_tool()
        return out

    def close_tool() -> list[str]:
        nonlocal blocks, tool_open
        tool_open = False
        blocks += 1
        return [sse("content_block_stop", {"type": "content_block_stop", "index": blocks - 1})]

    try:
        yield sse("message_start", {"type": "message_start", "message": shape.message(
            [], None, None, shape.usage(0), None)})
        yield _PING
        try:
            async for item in answer_items(first, events, shape.tools, prepared.keepalive_s, first_text):
                if isinstance(item, KeepAlive):
                    yield _PING
                elif isinstance(item, Output):
                    for line in emit(item):
                        yield line
                elif isinstance(item, Finished):
                    if blocks == 0 and not text_open:  # an empty answer is one empty text block, as its body
                        for line in open_text():
                            yield line
                    if text_open:
                        for line in close_text():
                            yield line
                    if tool_open:  # cut inside a call's input (max_tokens): the block ends as it is
                        for line in close_tool():
                            yield line
                    finish = item.result.finish
                    reason, sequence = shape.stop(finish, item.calls > 0)
                    yield sse("message_delta", {
                        "type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": sequence},
                        "usage": shape.usage(finish.usage.completion_tokens, item.result),
                        "guardrail": item.result.guardrail})
                    yield sse("message_stop", {"type": "message_stop"})
        except ServerShuttingDown as exc:  # the drain deadline passed (service/drain.py)
            yield sse("error", error_body(503, str(exc)))
        except (GenerationFailed, GenerationRejected) as exc:
            yield sse("error", error_body(500, str(exc)))
    finally:
        job.cancel.set()


@router.post(
    "/messages",
    response_model=MessageResponse,
    responses={200: {"content": {"text/event-stream": {}}, "description": "a message object, or SSE events when "
                     "stream=true"},
               **{status: {"model": AnthropicError, "description": description} for status, description in (
                   (400, "Invalid request: `error.param` names the field"),
                   (401, "Unknown, rotated or revoked API key; or none when one is required."),
                   (403, "The API key's policy does not allow a list, request terms, or a weaker guard."),
                   (404, "Unknown model or word list."), (413, "Body or request terms beyond the server's limits."),
                   (429, "Rate limit or full queue: retry after Retry-After seconds."),
                   (500, "The generation failed."), (503, "Shutting down or the engine is unavailable."))}},
    summary="Anthropic Messages API with banned terms enforced during decoding",
)
async def create_message(body: MessagesRequest, request: Request, response: Response,
                         runtime: RuntimeDep) -> StreamingResponse | dict[str, Any]:
    reject_unsupported(body)  # before the prompt is tokenized
    tools = _tool_use(runtime, body)
    prepared = await prepare_chat(runtime, request, body, ENDPOINT, body.chat_messages(),
                                  [t.function() for t in body.tools or ()], tools, body.max_tokens,
                                  prompt_param="messages")
    shape = MessagesShape(runtime, body, tools, len(prepared.generation.prompt_ids))
    answer = await respond(runtime, request, prepared, shape, ENDPOINT, message_events)
    if isinstance(answer, dict):
        response.headers.update(guard_headers([answer["guardrail"]]))
    return answer


@router.post(
    "/messages/count_tokens",
    responses={400: {"model": AnthropicError, "description": "Invalid request: `error.param` names the field"},
               401: {"model": AnthropicError, "description": "Unknown, rotated or revoked API key."},
               404: {"model": AnthropicError, "description": "Unknown model."},
               413: {"model": AnthropicError, "description": "Body beyond the server's limits."}},
    summary="The prompt tokens a message request would take (Anthropic's count_tokens)",
)
async def count_message_tokens(body: CountTokensRequest, runtime: RuntimeDep) -> dict[str, int]:
    """``{"input_tokens": n}``: the prompt as ``POST /v1/messages`` would render it (the chat template, the
    system turn, the tools unless ``tool_choice`` is ``none``), tokenized by the served tokenizer. Nothing is
    generated, so the word lists and sampling fields do not matter here.

    Raises:
        ApiError: 404 for an unknown ``model``; 400 naming ``tools`` when the chat template cannot render them,
            ``messages`` when the template rejects the turns or they exceed the context.
    """
    if body.model != runtime.model_id:
        raise ApiError(404, f"model {body.model!r} is not served here (GET /v1/models lists {runtime.model_id!r})",
                       param="model")
    shown = body.tools if body.tools and (body.tool_choice is None or body.tool_choice.type != "none") else None
    functions = [t.function() for t in shown] if shown else None
    ids = await prompt_token_ids(runtime, "messages", messages=chat_turns(body.system, body.messages),
                                 tools=functions, chat_template=chat_template_for(runtime, functions is not None))
    return {"input_tokens": len(ids)}
