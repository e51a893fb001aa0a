"""Request and response bodies of ``POST /v1/messages`` (Anthropic's Messages API).

Fields follow Anthropic's API reference (``model``, ``messages``, ``system``, ``max_tokens``, ``temperature``,
``top_p``, ``top_k``, ``stop_sequences``, ``stream``, ``metadata``, ``tools``, ``tool_choice``,
``output_config.format``: structured output held to a JSON grammar under the guard); content blocks
of type ``text``, ``tool_use`` and ``tool_result``; an image or document block is refused with 400 naming it
(dropping it would answer a different question). The guard's extensions are those of chat completions
(``wordlists``, ``banned_terms`` …, :class:`~service.schemas.generation.GenerationFields`).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from guardrail.grammar.format import StructuredOutput
from service.schemas.fields import MESSAGES, refused
from service.schemas.generation import UNSUPPORTED_FIELDS, GenerationFields
from service.schemas.open_object import OpenObject
from service.schemas.text import Text

#: Anthropic's ``stop_reason`` by this service's finish_reason. ``content_filter`` (the rollback budget ran out,
#: or every candidate token was banned) is ``refusal``, Anthropic's reason for an answer its safety layer ended.
#: ``stop`` is ``stop_sequence`` when one of ``stop_sequences`` ended the answer, ``tool_use`` when the answer
#: called tools, else ``end_turn``.
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "content_filter": "refusal"}


class TextBlockParam(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["text"]
    text: Text


class ToolUseBlockParam(BaseModel):
    """A tool call an earlier assistant turn made."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["tool_use"]
    id: Text
    name: Text = Field(min_length=1, max_length=64)
    input: dict[str, Any] = Field(description="The call's arguments (a JSON object).")


class ToolResultBlockParam(BaseModel):
    """A tool's answer to a call (in a user turn)."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["tool_result"]
    tool_use_id: Text
    content: Text | list[TextBlockParam] = ""
    is_error: bool | None = None

    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(b.text for b in self.content)


ContentBlock = Annotated[TextBlockParam | ToolUseBlockParam | ToolResultBlockParam, Field(discriminator="type")]


class MessageParam(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["user", "assistant"]
    content: Text | list[ContentBlock]


class ToolParam(BaseModel):
    """A client tool: ``{"name", "description", "input_schema"}``."""

    model_config = ConfigDict(extra="ignore")

    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_\-]+$")]
    description: Text | None = None
    input_schema: dict[str, Any] = Field(description="A JSON Schema object.")
    strict: bool | None = Field(None, description="true: a call's input follows input_schema (a grammar under "
                                "the guard), whatever the tool choice.")

    def function(self) -> dict[str, Any]:
        """The tool as OpenAI's function tool (what the chat templates render and the grammar reads)."""
        function: dict[str, Any] = {"name": self.name, "parameters": self.input_schema}
        if self.description is not None:
            function["description"] = self.description
        if self.strict:
            function["strict"] = True
        return {"type": "function", "function": function}


class ToolChoiceParam(BaseModel):
    """``auto`` (the model decides), ``any`` (some tool must be called), ``tool`` (the named one), ``none``."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["auto", "any", "tool", "none"]
    name: Text | None = None
    disable_parallel_tool_use: bool | None = None


class OutputFormat(BaseModel):
    """``output_config.format``: ``{"type": "json_schema", "schema": {...}}``."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema", description="The answer's JSON schema.")


class OutputConfig(BaseModel):
    """``output_config``: the answer's ``format``; ``effort`` (how long a reasoning model thinks) is ignored:
    the served models do not reason before answering."""

    model_config = ConfigDict(extra="ignore")

    format: OutputFormat | None = None
    effort: str | None = None


class CountTokensRequest(OpenObject):
    """``POST /v1/messages/count_tokens``: the prompt fields of a message request."""

    model: str
    messages: list[MessageParam] = Field(min_length=1)
    system: Text | list[TextBlockParam] | None = None
    tools: list[ToolParam] | None = Field(None, max_length=128)
    tool_choice: ToolChoiceParam | None = None


class MessagesRequest(GenerationFields):
    """Anthropic's request; the sampling fields and this service's extensions (``banned_terms``, ``wordlists`` …)
    are those of chat completions."""

    messages: list[MessageParam] = Field(min_length=1)
    system: Text | list[TextBlockParam] | None = Field(None, description="The system prompt.")
    max_tokens: int = Field(ge=1, description="Completion token limit (required, as by Anthropic; capped by the "
                            "server).")
    stop_sequences: list[Annotated[Text, Field(min_length=1)]] | None = Field(None, max_length=16)
    metadata: dict[str, Any] | None = Field(None, description="Accepted and ignored (Anthropic's user_id).")
    tools: list[ToolParam] | None = Field(None, max_length=128)
    tool_choice: ToolChoiceParam | None = None
    output_config: OutputConfig | None = Field(None, description="format: the answer follows a JSON schema.")
    n: Literal[1] = 1

    refused_fields: ClassVar[frozenset[str]] = (UNSUPPORTED_FIELDS | refused(MESSAGES)) - {"thinking"}

    def unsupported_field(self) -> str | None:
        """As chat's, plus Anthropic's fields this service cannot honour; ``thinking`` is refused unless
        ``{"type": "disabled"}``."""
        thinking = (self.model_extra or {}).get("thinking")
        if isinstance(thinking, dict) and thinking.get("type") not in (None, "disabled"):
            return "thinking"
        return super().unsupported_field()

    def structured_output(self) -> StructuredOutput | None:
        """``output_config.format`` as the answer's JSON format (``None``: free text).

        Raises:
            ValueError: ``output_config.format: ...`` when the schema is not a JSON object.
        """
        output_format = self.output_config.format if self.output_config is not None else None
        if output_format is None:
            return None
        return StructuredOutput.from_schema(output_format.schema_, field="output_config.format")

    def structured_output_field(self) -> str:
        return "output_config.format"

    def stop_list(self) -> list[str]:
        return list(self.stop_sequences or ()) + super().stop_list()

    def chat_messages(self) -> list[dict[str, Any]]:
        """The conversation as Hugging Face chat templates read it (:func:`chat_turns`)."""
        return chat_turns(self.system, self.messages)


def chat_turns(system: str | list[TextBlockParam] | None, messages: list[MessageParam]) -> list[dict[str, Any]]:
    """A conversation as Hugging Face chat templates read it: the system turn first; an assistant turn's
    ``tool_use`` blocks as its ``tool_calls``; a user turn's ``tool_result`` blocks as ``tool`` turns (before the
    turn's text, in their order)."""
    turns: list[dict[str, Any]] = []
    system_text = system if system is None or isinstance(system, str) else "".join(b.text for b in system)
    if system_text:
        turns.append({"role": "system", "content": system_text})
    for message in messages:
        if isinstance(message.content, str):
            turns.append({"role": message.role, "content": message.content})
            continue
        text = "".join(b.text for b in message.content if isinstance(b, TextBlockParam))
        calls = [{"id": b.id, "type": "function", "function": {"name": b.name, "arguments": b.input}}
                 for b in message.content if isinstance(b, ToolUseBlockParam)]
        for block in message.content:
            if isinstance(block, ToolResultBlockParam):
                turns.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": block.text()})
        if text or calls or not any(isinstance(b, ToolResultBlockParam) for b in message.content):
            turn: dict[str, Any] = {"role": message.role, "content": text}
            if calls:
                turn["tool_calls"] = calls
            turns.append(turn)
    return turns


def tool_input(arguments: str) -> dict[str, Any]:
    """A parsed call's arguments (a JSON object string, :class:`service.tool_calls.ToolCall`) as ``input``; ``{}``
    for the arguments of a call cut by ``max_tokens`` (not JSON yet: ``stop_reason`` is ``max_tokens``)."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class MessageUsage(BaseModel):
    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int = Field(description="Prompt tokens served from the prefix cache.")
    cache_creation_input_tokens: int = 0
    rollbacks: int = Field(description="Rollbacks caused by banned terms (extension).")


class TextBlock(BaseModel):
    type: Literal["text"] = "text"
    text: str


class ToolUseBlock(BaseModel):
    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any]


class MessageResponse(BaseModel):
    """A ``message`` object (not streamed)."""

    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    content: list[TextBlock | ToolUseBlock]
    model: str
    stop_reason: Literal["end_turn", "max_tokens", "stop_sequence", "tool_use", "refusal"]
    stop_sequence: str | None
    usage: MessageUsage
    guardrail: dict[str, Any] = Field(description="Why the answer was changed (extension; the ``guardrail`` record "
                                      "of a chat choice: rollbacks, lists, filtered_by).")


class AnthropicErrorDetail(BaseModel):
    type: str = Field(description="invalid_request_error, authentication_error, permission_error, not_found_error, "
                      "request_too_large, rate_limit_error, api_error or overloaded_error.")
    message: str
    param: str | None = Field(None, description="The request field at fault (extension).")


class AnthropicError(BaseModel):
    """Anthropic's error body."""

    type: Literal["error"] = "error"
    error: AnthropicErrorDetail
