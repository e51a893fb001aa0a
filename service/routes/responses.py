"""``POST /v1/responses`` (OpenAI's Responses API, text in and out, streaming and not), translated onto the
chat path: ``instructions`` becomes the system turn, ``input`` (a string or messages) the other turns,
``max_output_tokens`` the token limit. Nothing is stored (``store`` is ignored, ``previous_response_id`` is
refused). Function tools (the Responses API's flat ``{"type": "function", "name", "description", "parameters"}``)
are rendered by the chat template and read back by :mod:`service.tool_calls`, as on chat completions: calls are
``function_call`` output items, and ``function_call`` / ``function_call_output`` input items are the earlier
turns' calls and the tools' answers. Built-in tools (web search, file search …) are refused with 400.
``text.format`` ``json_schema`` / ``json_object`` holds the answer to a JSON grammar under the guard
(docs/structured-output.md), as ``response_format`` does on chat completions; a function tool is ``strict`` unless
it says ``strict: false`` (the Responses API's default), and its call then follows its ``parameters``."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any, ClassVar, Literal

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from guardrail.grammar.format import StructuredOutput
from service.auth import require_client
from service.chat_prompt import prepare_chat
from service.deps import RuntimeDep
from service.errors import ApiError, error_body
from service.event_stream import Finished, KeepAlive, Output, OwnStreamShape, answer_items
from service.generation import (
    GENERATION_ERRORS,
    SHUTTING_DOWN,
    SSE_KEEPALIVE,
    ChoiceEvent,
    ChoiceResult,
    Prepared,
    ResponseIdentity,
    UsageTotal,
    guard_headers,
    reject_unsupported,
    respond,
    sse_event,
    structured_output_of,
)
from service.runtime import Runtime
from service.schemas.fields import RESPONSES, refused
from service.schemas.generation import UNSUPPORTED_FIELDS, GenerationFields
from service.schemas.text import Text
from service.tool_calls import ToolCall, ToolCallPiece, parse_answer
from service.tool_choice import ToolUse, tool_use
from service.worker import GenerationFailed, GenerationRejected, Job, ServerShuttingDown

router = APIRouter(prefix="/v1", tags=["generation"], dependencies=[Depends(require_client)])

ENDPOINT = "/v1/responses"
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


class FunctionCallItem(BaseModel):
    """An earlier turn's call (``input`` item ``{"type": "function_call", "call_id", "name", "arguments"}``)."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["function_call"]
    call_id: Text
    name: Text = Field(min_length=1, max_length=64)
    arguments: Text = Field(description="The arguments as a JSON string.")


class FunctionCallOutputItem(BaseModel):
    """A tool's answer to a call (``{"type": "function_call_output", "call_id", "output"}``)."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["function_call_output"]
    call_id: Text
    output: Text


class FunctionTool(BaseModel):
    """A function tool in the Responses API's flat shape."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["function"] = Field(description="Only function tools (built-in tools are refused with 400).")
    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")]
    description: Text | None = None
    parameters: dict[str, Any] | None = Field(None, description="A JSON Schema object.")
    strict: bool | None = Field(None, description="Calls follow parameters (a grammar under the guard); omitted "
                                "or null: true, the Responses API's default.")

    def function(self) -> dict[str, Any]:
        """The tool as chat completions' function tool (what the chat templates render and the grammar reads)."""
        function = self.model_dump(exclude_none=True, exclude={"type", "strict"})
        return {"type": "function", "function": {**function, "strict": self.strict is not False}}


class FunctionChoice(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["function"]
    name: Text


InputItem = InputMessage | FunctionCallItem | FunctionCallOutputItem


class ResponsesRequest(GenerationFields):
    """The Responses API's request; the sampling fields and this service's extensions (``banned_terms``,
    ``wordlists`` …) are those of chat completions."""

    input: Text | Annotated[list[InputItem], Field(min_length=1)] = Field(
        description="A user message's text, or items: messages, function calls and their outputs.")
    instructions: Text | None = Field(None, description="A system message put before the input.")
    max_output_tokens: int | None = Field(None, ge=1, description="Completion token limit.")
    text: dict[str, Any] | None = Field(None, description='Output options: {"format": {"type": "text"}} (default), '
                                        '{"type": "json_object"} or {"type": "json_schema", "name", "schema", '
                                        '"strict"}: the answer is held to the JSON grammar under the guard.')
    tools: list[FunctionTool] | None = Field(None, max_length=128, description="Functions the model may call.")
    tool_choice: Literal["none", "auto", "required"] | FunctionChoice | None = Field(
        None, description="As on chat completions; a named function is {\"type\": \"function\", \"name\"}.")
    parallel_tool_calls: bool | None = Field(None, description="false: at most one call is returned.")
    n: Literal[1] = 1

    refused_fields: ClassVar[frozenset[str]] = UNSUPPORTED_FIELDS | refused(RESPONSES)

    def messages(self) -> list[dict[str, Any]]:
        """The turns as Hugging Face chat templates read them: consecutive ``function_call`` items are one
        assistant turn's ``tool_calls`` (arguments as an object where they parse), a ``function_call_output``
        a ``tool`` turn."""
        turns: list[dict[str, Any]] = [{"role": "user", "content": self.input}] if isinstance(self.input, str) else []
        for item in self.input if not isinstance(self.input, str) else ():
            if isinstance(item, InputMessage):
                turns.append({"role": "system" if item.role == "developer" else item.role, "content": item.text()})
            elif isinstance(item, FunctionCallOutputItem):
                turns.append({"role": "tool", "tool_call_id": item.call_id, "content": item.output})
            else:
                try:
                    arguments: Any = json.loads(item.arguments)
                except ValueError:
                    arguments = item.arguments
                call = {"id": item.call_id, "type": "function", "function": {"name": item.name, "arguments": arguments}}
                if not turns or turns[-1]["role"] != "assistant" or "tool_calls" not in turns[-1]:
                    turns.append({"role": "assistant", "content": "", "tool_calls": []})
                turns[-1]["tool_calls"].append(call)
        if self.instructions:
            turns.insert(0, {"role": "system", "content": self.instructions})
        return turns

    def text_format(self) -> dict[str, Any]:
        """``text.format`` (``{"type": "text"}`` when not given)."""
        value = (self.text or {}).get("format")
        return value if value is not None else {"type": "text"}

    def structured_output(self) -> StructuredOutput | None:
        """``text.format`` as the answer's JSON format (``None``: text).

        Raises:
            ValueError: ``text.format: ...``, an unknown type or a malformed ``json_schema``.
        """
        value = self.text_format()
        if not isinstance(value, dict):
            raise ValueError(f"text.format: must be an object, got {type(value).__name__}")
        kind = value.get("type", "text")
        if kind == "text":
            return None
        if kind == "json_object":
            return StructuredOutput.from_response_format({"type": "json_object"})
        if kind != "json_schema":
            raise ValueError(f"text.format: type must be 'text', 'json_object' or 'json_schema', got {kind!r}")
        if not isinstance(value.get("schema"), dict):
            raise ValueError("text.format: type 'json_schema' needs a schema object")
        name, strict = value.get("name"), value.get("strict")
        if name is not None and not isinstance(name, str):
            raise ValueError("text.format: name must be a string")
        if strict is not None and not isinstance(strict, bool):
            raise ValueError("text.format: strict must be a boolean")
        return StructuredOutput.from_schema(value["schema"], "json_schema", name, strict, field="text.format")

    def structured_output_field(self) -> str:
        return "text.format"

    def tool_use(self, runtime: Runtime) -> ToolUse | None:
        """How the answer is made and read for calls (None: no tools, or ``tool_choice: none``).

        Raises:
            ApiError: 400 naming ``tool_choice`` when it asks for a call without tools or names a function that
                is not in ``tools``.
        """
        choice = self.tool_choice
        if choice not in (None, "none") and not self.tools:
            raise ApiError(400, "tool_choice needs tools", param="tool_choice", code="invalid_value")
        if isinstance(choice, FunctionChoice) and choice.name not in {t.name for t in self.tools or ()}:
            raise ApiError(400, f"tool_choice names function {choice.name!r}, which is not in tools",
                           param="tool_choice.name", code="invalid_value")
        if not self.tools or choice == "none":
            return None
        functions = [t.function() for t in self.tools]
        text_format = structured_output_of(runtime, self)
        where = {"schema_param": lambda i: f"tools.{i}.parameters"}
        if isinstance(choice, FunctionChoice):
            return tool_use(runtime, functions, "named", choice.name, text_format=text_format, **where)
        return tool_use(runtime, functions, "required" if choice == "required" else "auto",
                        single=self.parallel_tool_calls is False, text_format=text_format, **where)


def _usage(usage: dict[str, Any]) -> dict[str, Any]:
    """The Responses API's usage from chat usage (the guard's counters kept as extensions)."""
    extra = {k: v for k, v in usage.items()
             if k not in ("prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details")}
    return {"input_tokens": usage["prompt_tokens"], "output_tokens": usage["completion_tokens"],
            "total_tokens": usage["total_tokens"],
            "input_tokens_details": {"cached_tokens": usage["prompt_tokens_details"]["cached_tokens"]},
            "output_tokens_details": {"reasoning_tokens": 0}, **extra}


class ResponsesShape(OwnStreamShape):
    """``response`` objects; its stream events are written by :func:`response_events`. Output items: the message
    (when the answer has text, or has nothing else), then one ``function_call`` item per call."""

    id_prefix = "resp"

    def __init__(self, body: ResponsesRequest, tools: ToolUse | None = None) -> None:
        self.request = body
        self.tools = tools
        self.message_id = f"msg_{uuid.uuid4().hex}"

    def response(self, c: ResponseIdentity, status: str, output: list[dict[str, Any]] | None = None,
                 finish: ChoiceResult | None = None, usage: dict[str, Any] | None = None) -> dict[str, Any]:
        reason = finish.finish.reason if finish is not None else None
        choice = self.request.tool_choice
        return {
            "id": c.id, "object": "response", "created_at": c.created, "model": c.model, "status": status,
            "instructions": self.request.instructions, "max_output_tokens": self.request.max_output_tokens,
            "temperature": self.request.temperature, "top_p": self.request.top_p, "output": output or [],
            "incomplete_details": {"reason": _INCOMPLETE[reason]} if reason in _INCOMPLETE else None,
            "error": None, "parallel_tool_calls": self.request.parallel_tool_calls is not False,
            "tool_choice": choice.model_dump() if isinstance(choice, FunctionChoice) else choice or (
                "auto" if self.request.tools else "none"),
            "tools": [t.model_dump(exclude_none=True) for t in self.request.tools or ()],
            "text": {"format": self.request.text_format()}, "truncation": "disabled", "store": False,
            "usage": _usage(usage) if usage is not None else None,
            "guardrail": finish.guardrail if finish is not None else None,
        }

    def message(self, text: str, status: str) -> dict[str, Any]:
        return {"type": "message", "id": self.message_id, "status": status, "role": "assistant",
                "content": [self.part(text)]}

    @staticmethod
    def part(text: str) -> dict[str, Any]:
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}

    @staticmethod
    def call_item(call: ToolCall, arguments: str | None = None, status: str = "completed") -> dict[str, Any]:
        return {"type": "function_call", "id": "fc_" + call.id.removeprefix("call_"), "call_id": call.id,
                "name": call.name, "arguments": call.arguments if arguments is None else arguments, "status": status}

    def output(self, text: str, calls: list[ToolCall], status: str) -> list[dict[str, Any]]:
        items = [self.message(text, status)] if text or not calls else []
        return items + [self.call_item(call) for call in calls]

    def read(self, text: str) -> tuple[str, list[ToolCall]]:
        """An answer's text and calls."""
        if self.tools is None:
            return text, []
        content, calls = parse_answer(self.tools.parser, text)
        return content or "", self.tools.limit(calls)

    def body(self, c: ResponseIdentity, results: list[ChoiceResult], usage: dict[str, Any]) -> dict[str, Any]:
        [result] = results
        status = "incomplete" if result.finish.reason in _INCOMPLETE else "completed"
        text, calls = self.read(result.finish.text)
        return self.response(c, status, self.output(text, calls, status), result, usage)


async def response_events(first: ChoiceEvent, events: AsyncIterator[ChoiceEvent], shape: Any,
                          c: ResponseIdentity, prepared: Prepared, first_text: Callable[[], None],
                          job: Job) -> AsyncIterator[str]:
    """The Responses API's SSE: ``response.created``, ``response.in_progress``, then per output item: a message's
    item and part added, one ``response.output_text.delta`` per released text, the text, part and item done; a
    call's item added, its ``response.function_call_arguments.delta`` (whole, once the call is complete) and
    ``.done``, the item done; then ``response.completed`` (or ``response.incomplete``) with usage. An answer with
    no output is one empty message. A failure after the start becomes an ``error`` event. No ``[DONE]``: the
    Responses API ends with the terminal event."""
    assert isinstance(shape, ResponsesShape)
    sequence = 0
    items: list[dict[str, Any]] = []  # the output so far (a message while open: text still growing)
    message_at: int | None = None  # the open message's output_index
    calls_at: dict[int, int] = {}  # a call's index among the calls -> its output_index
    text = ""

    def event(kind: str, **fields: Any) -> str:
        nonlocal sequence
        sequence += 1
        payload = {"type": kind, "sequence_number": sequence - 1, **fields}
        return f"event: {kind}\n" + sse_event(payload)

    def open_message() -> list[str]:
        nonlocal message_at
        message_at = len(items)
        items.append(shape.message("", "in_progress"))
        return [event("response.output_item.added", output_index=message_at, item={**items[-1], "content": []}),
                event("response.content_part.added", item_id=shape.message_id, output_index=message_at,
                      content_index=0, part=shape.part(""))]

    def close_message(status: str) -> list[str]:
        nonlocal message_at
        assert message_at is not None
        where = {"item_id": shape.message_id, "output_index": message_at, "content_index": 0}
        items[message_at] = shape.message(text, status)
        at, message_at = message_at, None
        return [event("response.output_text.done", **where, text=text, logprobs=[]),
                event("response.content_part.done", **where, part=shape.part(text)),
                event("response.output_item.done", output_index=at, item=items[at])]

    def emit(output: Output) -> list[str]:
        nonlocal text
        out: list[str] = []
        if output.text:
            if message_at is None:
                out += open_message()
            text += output.text
            out.append(event("response.output_text.delta", item_id=shape.message_id, output_index=message_at,
                             content_index=0, delta=output.text, logprobs=[]))
        for piece in output.pieces:
            out += call_events(piece)
        return out

    def call_events(piece: ToolCallPiece) -> list[str]:
        out: list[str] = []
        if piece.first:
            if message_at is not None:
                out += close_message("completed")
            calls_at[piece.index] = len(items)
            items.append(shape.call_item(ToolCall(piece.name, "", piece.id), status="in_progress"))
            out.append(event("response.output_item.added", output_index=calls_at[piece.index], item=items[-1]))
        at = calls_at[piece.index]
        if piece.arguments:
            items[at] = {**items[at], "arguments": items[at]["arguments"] + piece.arguments}
            out.append(event("response.function_call_arguments.delta", item_id=items[at]["id"], output_index=at,
                             delta=piece.arguments))
        if piece.done is not None:
            items[at] = shape.call_item(piece.done)
            out += [event("response.function_call_arguments.done", item_id=items[at]["id"], output_index=at,
                          name=piece.name, arguments=piece.done.arguments),
                    event("response.output_item.done", output_index=at, item=items[at])]
        return out

    try:
        yield event("response.created", response=shape.response(c, "in_progress"))
        yield event("response.in_progress", response=shape.response(c, "in_progress"))
        try:
            async for item in answer_items(first, events, shape.tools, prepared.keepalive_s, first_text):
                if isinstance(item, KeepAlive):
                    yield SSE_KEEPALIVE
                elif isinstance(item, Output):
                    for line in emit(item):
                        yield line
                elif isinstance(item, Finished):
                    finish = item.result.finish
                    status = "incomplete" if finish.reason in _INCOMPLETE else "completed"
                    if not items:
                        for line in open_message():
                            yield line
                    if message_at is not None:
                        for line in close_message(status):
                            yield line
                    total = UsageTotal()
                    total.add(finish.usage)
                    yield event(f"response.{status}", response=shape.response(c, status, items, item.result,
                                                                              total.to_dict()))
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
    reject_unsupported(body)  # before the prompt is tokenized
    tools = body.tool_use(runtime)
    prepared = await prepare_chat(runtime, request, body, ENDPOINT, body.messages(),
                                  [t.function() for t in body.tools or ()], tools,
                                  body.max_output_tokens or body.max_tokens, prompt_param="input")
    answer = await respond(runtime, request, prepared, ResponsesShape(body, tools), ENDPOINT, response_events)
    if isinstance(answer, dict):
        response.headers.update(guard_headers([answer["guardrail"]]))
    return answer
