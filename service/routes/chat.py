"""``POST /v1/chat/completions`` (OpenAI's chat completions, streaming and not), tool calls included."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import StreamingResponse

from guardrail.guard.logprobs import TokenLogprob
from service.auth import require_client
from service.chat_prompt import prepare_chat
from service.deps import RuntimeDep
from service.errors import ApiError
from service.generation import (
    GENERATION_ERRORS,
    ChoiceResult,
    ResponseIdentity,
    guard_headers,
    reject_unsupported,
    respond,
    structured_output_of,
)
from service.logprobs import chat_logprobs
from service.runtime import Runtime
from service.schemas.generation import ChatCompletion, ChatCompletionRequest, ChatMessage, NamedToolChoice
from service.tool_calls import ToolCall, ToolCallPiece, ToolCallStream, parse_answer
from service.tool_choice import ToolUse, tool_use

router = APIRouter(prefix="/v1", tags=["generation"], dependencies=[Depends(require_client)])

ENDPOINT = "/v1/chat/completions"


class ChatShape:
    """chat.completion bodies and chat.completion.chunk events; with tools, content and tool calls are told
    apart as the text streams (one :class:`ToolCallStream` per choice): a call's first delta carries its
    ``index``, ``id``, ``type`` and ``function.name`` (and ``arguments: ""``), the next ones fragments of
    ``function.arguments`` (OpenAI's and vLLM's streaming). With ``logprobs`` (the request asked), each choice
    carries ``logprobs.content`` (:mod:`service.logprobs`)."""

    id_prefix = "chatcmpl"

    def __init__(self, tools: ToolUse | None = None, logprobs: bool = False) -> None:
        self.tools = tools
        self.logprobs = logprobs
        self._streams: dict[int, ToolCallStream] = {}

    def add_logprobs(self, chunk: dict[str, Any], index: int, records: Sequence[TokenLogprob]) -> None:
        chunk["choices"][0]["logprobs"] = chat_logprobs(records)

    @staticmethod
    def _chunk(c: ResponseIdentity, index: int, delta: dict[str, Any], reason: str | None,
               **extra: Any) -> dict[str, Any]:
        choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": reason, **extra}
        return {**c.head("chat.completion.chunk"), "choices": [choice]}

    def _stream(self, index: int) -> ToolCallStream | None:
        if self.tools is None:
            return None
        if index not in self._streams:
            self._streams[index] = ToolCallStream(self.tools.parser, 1 if self.tools.single else None)
        return self._streams[index]

    def _call_chunks(self, c: ResponseIdentity, index: int, content: str,
                     pieces: list[ToolCallPiece]) -> list[dict[str, Any]]:
        chunks = [self._chunk(c, index, {"content": content}, None)] if content else []
        for piece in pieces:
            if piece.first:
                delta: dict[str, Any] = {"index": piece.index, "id": piece.id, "type": "function",
                                         "function": {"name": piece.name, "arguments": piece.arguments}}
            elif piece.arguments:
                delta = {"index": piece.index, "function": {"arguments": piece.arguments}}
            else:
                continue  # the end of a call whose arguments were all sent
            chunks.append(self._chunk(c, index, {"tool_calls": [delta]}, None))
        return chunks

    def first_chunk(self, c: ResponseIdentity, index: int) -> dict[str, Any]:
        return self._chunk(c, index, {"role": "assistant", "content": ""}, None)

    def delta_chunks(self, c: ResponseIdentity, index: int, text: str) -> list[dict[str, Any]]:
        stream = self._stream(index)
        if stream is None:
            return [self._chunk(c, index, {"content": text}, None)]
        content, pieces = stream.feed(text)
        return self._call_chunks(c, index, content, pieces)

    def finish_chunks(self, c: ResponseIdentity, index: int, result: ChoiceResult) -> list[dict[str, Any]]:
        stream = self._stream(index)
        chunks = []
        reason: str = result.finish.reason
        if stream is not None:
            content, pieces = stream.finish()
            chunks = self._call_chunks(c, index, content, pieces)
            if stream.calls and reason == "stop":
                reason = "tool_calls"
        chunks.append(self._chunk(c, index, {}, reason, guardrail=result.guardrail))
        return chunks

    def usage_chunk(self, c: ResponseIdentity, usage: dict[str, Any]) -> dict[str, Any]:
        return {**c.head("chat.completion.chunk"), "choices": [], "usage": usage}

    def _choice(self, index: int, result: ChoiceResult) -> dict[str, Any]:
        finish = result.finish
        content: str | None = finish.text
        calls: list[ToolCall] = []
        if self.tools is not None:
            content, calls = parse_answer(self.tools.parser, finish.text)
            calls = self.tools.limit(calls)
        reason = "tool_calls" if calls and finish.reason == "stop" else finish.reason
        message = {"role": "assistant", "content": content, "refusal": None,
                   "tool_calls": [call.to_dict() for call in calls] or None}
        logprobs = chat_logprobs(result.logprobs) if self.logprobs else None
        return {"index": index, "message": message, "logprobs": logprobs, "finish_reason": reason,
                "guardrail": result.guardrail}

    def body(self, c: ResponseIdentity, results: list[ChoiceResult], usage: dict[str, Any]) -> dict[str, Any]:
        return {**c.head("chat.completion"), "choices": [self._choice(i, r) for i, r in enumerate(results)],
                "usage": usage}


def _check_tool_choice(body: ChatCompletionRequest) -> None:
    """Raises ApiError 400 naming ``tool_choice`` when it asks for a tool the request does not give."""
    choice = body.tool_choice
    if choice is not None and choice != "none" and not body.tools:
        raise ApiError(400, "tool_choice needs tools", param="tool_choice", code="invalid_value")
    if isinstance(choice, NamedToolChoice) and choice.function.name not in {t.function.name for t in body.tools or ()}:
        raise ApiError(400, f"tool_choice names function {choice.function.name!r}, which is not in tools",
                       param="tool_choice", code="invalid_value")


def _message(m: ChatMessage) -> dict[str, Any]:
    """A message as Hugging Face chat templates read it ("developer" is OpenAI's newer name for system;
    a call's arguments are given as an object where they parse, as those templates expect)."""
    message: dict[str, Any] = {"role": "system" if m.role == "developer" else m.role, "content": m.text()}
    if m.tool_calls:
        calls = []
        for call in m.tool_calls:
            try:
                arguments: Any = json.loads(call.function.arguments)
            except ValueError:
                arguments = call.function.arguments
            calls.append({"id": call.id, "type": "function",
                          "function": {"name": call.function.name, "arguments": arguments}})
        message["tool_calls"] = calls
    if m.tool_call_id:
        message["tool_call_id"] = m.tool_call_id
    if m.name:
        message["name"] = m.name
    return message


def _tool_use(runtime: Runtime, body: ChatCompletionRequest) -> ToolUse | None:
    """How the answer is made and read for calls (None: no tools, or ``tool_choice: none``)."""
    if not body.tools or body.tool_choice == "none":
        return None
    choice = body.tool_choice
    functions = [t.model_dump(exclude_none=True) for t in body.tools]
    text_format = structured_output_of(runtime, body)
    if isinstance(choice, NamedToolChoice):
        return tool_use(runtime, functions, "named", choice.function.name, text_format=text_format)
    return tool_use(runtime, functions, "required" if choice == "required" else "auto",
                    single=body.parallel_tool_calls is False, text_format=text_format)


@router.post(
    "/chat/completions",
    response_model=ChatCompletion,
    responses={200: {"content": {"text/event-stream": {}}, "description": "JSON, or SSE when stream=true"},
               **GENERATION_ERRORS},
    summary="Chat completion with banned terms enforced during decoding",
)
async def create_chat_completion(body: ChatCompletionRequest, request: Request, response: Response,
                                 runtime: RuntimeDep) -> StreamingResponse | dict[str, Any]:
    reject_unsupported(body)  # before the prompt is tokenized
    _check_tool_choice(body)
    messages = [_message(m) for m in body.messages]
    tools = _tool_use(runtime, body)
    prepared = await prepare_chat(runtime, request, body, ENDPOINT, messages,
                                  [t.model_dump(exclude_none=True) for t in body.tools or ()], tools,
                                  body.token_limit(), prompt_param="messages")
    shape = ChatShape(tools, logprobs=prepared.generation.params.logprobs is not None)
    answer = await respond(runtime, request, prepared, shape, ENDPOINT)
    if isinstance(answer, dict):
        response.headers.update(guard_headers([c["guardrail"] for c in answer["choices"]]))
    return answer
