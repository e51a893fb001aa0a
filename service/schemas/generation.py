"""Request and response bodies of ``/v1/chat/completions`` and ``/v1/completions`` (OpenAI's shapes).

Standard fields follow OpenAI's API reference, vLLM's extensions follow vLLM's sampling parameters
(``top_k``, ``min_p``, ``repetition_penalty``, ``min_tokens``, ``stop_token_ids``, ``ignore_eos``).
Fields this service cannot honour and that change what the answer means (``prompt_logprobs``,
``response_format`` other than text and JSON, vLLM's ``guided_*`` but ``guided_json`` …, see
:mod:`service.schemas.fields`) are refused with a 400 naming them rather than ignored; other unknown
fields (``metadata``, ``store``, ``service_tier``, ``reasoning_effort`` …) are ignored with one log line naming
them (as vLLM does). Tools (``tools``, ``tool_choice``, ``parallel_tool_calls``, the ``tool`` role, an assistant
message's ``tool_calls``) are rendered through the chat template and read back from the answer
(:mod:`service.tool_calls`). ``logprobs`` / ``top_logprobs`` (chat) and ``logprobs`` (completions) report the
delivered tokens' log-probabilities (docs/service.md, "Logprobs").
Extensions of this service: ``wordlists``, ``banned_terms`` and its aliases ``bad_words`` (vLLM) and
``banned_strings`` (TabbyAPI / exllamav2), ``watermark``, ``max_rollbacks``, ``evasion_guard``, ``obfuscation``,
``speculative``.
Structured output (docs/structured-output.md): ``response_format`` ``json_object`` / ``json_schema`` (chat and
text completions, as in vLLM) and vLLM's ``guided_json``, enforced by a grammar under the guard.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from guardrail.grammar.format import StructuredOutput
from guardrail.params import MAX_TOP_LOGPROBS, EvasionGuard
from service.schemas.fields import CHAT, is_set, refused
from service.schemas.open_object import OpenObject
from service.schemas.terms import ObfuscationSetting, TermItem, TermText
from service.schemas.text import Text

Role = Literal["system", "developer", "user", "assistant", "tool"]

#: Fields of OpenAI's or vLLM's request that change the answer and that this service does not implement
#: (:data:`service.schemas.fields.CHAT`): a request setting one (to anything but null, false or an empty list) is
#: refused with 400 naming it.
UNSUPPORTED_FIELDS = refused(CHAT)
_MAX_STOP_TOKEN_IDS = 64
#: ``response_format.type`` values served (docs/structured-output.md); another type is refused with 400.
RESPONSE_FORMAT_TYPES = ("text", "json_object", "json_schema")


RESPONSE_FORMAT_DOC = (
    '{"type": "text"} (default), {"type": "json_object"} or {"type": "json_schema", "json_schema": {"name", '
    '"schema", "strict"}}: the answer is held to the JSON grammar while the guard still rolls back banned terms '
    "(transformers engine only; docs/structured-output.md).")
GUIDED_JSON_DOC = "vLLM extension: a JSON schema the answer must follow (as response_format json_schema)."


def unknown_response_format(value: dict[str, Any] | None) -> str | None:
    """``"response_format"`` when its ``type`` is not one this service serves, else ``None``."""
    if value and value.get("type", "text") not in RESPONSE_FORMAT_TYPES:
        return "response_format"
    return None


def structured_output(response_format: dict[str, Any] | None,
                      guided_json: dict[str, Any] | str | None) -> StructuredOutput | None:
    """The answer's format from OpenAI's ``response_format`` or vLLM's ``guided_json`` (not both).

    Raises:
        ValueError: naming the field: both given, or a malformed value.
    """
    spec = StructuredOutput.from_response_format(response_format)
    if guided_json is None:
        return spec
    if spec is not None:
        raise ValueError("guided_json: give either response_format or guided_json, not both")
    return StructuredOutput.from_schema(guided_json, field="guided_json")


class StreamOptions(BaseModel):
    include_usage: bool = False
    include_guard_events: bool = Field(
        False, description="Extension (chat and text completions): the guard's rollbacks and each choice's finish as "
        "extra chunks with no choices and a guardrail_event field; the term and the retracted fragment only for "
        "lists the caller may read (docs/service.md, Guard events).")


class GenerationFields(OpenObject):
    """Fields shared by chat and text completions."""

    # OpenObject: unknown fields are kept in ``model_extra`` so that the route can refuse the ones in
    # refused_fields; the others are ignored.
    #: The undeclared fields this endpoint refuses when set (:mod:`service.schemas.fields`).
    refused_fields: ClassVar[frozenset[str]] = UNSUPPORTED_FIELDS

    model: str = Field(description="The served model's id (GET /v1/models).")
    max_tokens: int | None = Field(None, ge=1, description="Completion token limit (capped by the server).")
    temperature: float | None = Field(
        None, ge=0, le=2, description="0 = greedy; below 1e-5 counts as 0 (vLLM's rule: no overflow in softmax)."
    )
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=0, description="vLLM extension; 0 = off.")
    min_p: float | None = Field(None, ge=0, le=1, description="vLLM extension; 0 = off.")
    repetition_penalty: float | None = Field(None, gt=0, le=10, description="vLLM / transformers extension.")
    presence_penalty: float | None = Field(
        None, ge=-2, le=2, description="Subtracted once from the logit of every token already in the answer.")
    frequency_penalty: float | None = Field(
        None, ge=-2, le=2, description="Subtracted from a token's logit once per occurrence in the answer.")
    seed: int | None = Field(None, ge=0, le=2**63 - 1, description="With n > 1, choice i draws with seed + i "
                             "(modulo 2**63).")
    stop: Text | Annotated[list[Annotated[Text, Field(min_length=1)]], Field(max_length=16)] | None = None
    stop_token_ids: list[Annotated[int, Field(ge=0)]] | None = Field(
        None, max_length=_MAX_STOP_TOKEN_IDS, description="vLLM extension: token ids that end the answer "
        "(like EOS, and not included in the text).")
    ignore_eos: bool = Field(False, description="vLLM extension: do not end the answer at the model's EOS.")
    min_tokens: int | None = Field(
        None, ge=0, description="vLLM extension: EOS and stop_token_ids are masked until this many tokens.")
    n: int = Field(1, ge=1, le=16, description="Choices, generated one after another (server limit applies).")
    stream: bool = False
    stream_options: StreamOptions | None = None
    logit_bias: dict[str, Annotated[float, Field(ge=-100, le=100)]] | None = Field(
        None, description="Token id (as a string) -> bias in [-100, 100], added to the logits."
    )
    user: Text | None = Field(None, max_length=256)

    # -- extensions -------------------------------------------------------------------------------
    wordlists: list[Annotated[Text, Field(min_length=1, max_length=64)]] | None = Field(
        None, max_length=64, description="Word lists to enforce; omitted = the server's default set."
    )
    banned_terms: list[TermItem] | None = Field(None, description="Extra terms for this request only.")
    bad_words: list[TermText] | None = Field(None, description="vLLM's name for banned_terms (strings).")
    banned_strings: list[TermText] | None = Field(None, description="TabbyAPI's name for banned_terms.")
    watermark: bool = Field(False, description="Add a green-list watermark (POST /v1/watermark/detect).")
    max_rollbacks: int | None = Field(
        None, ge=0, description="Rollback budget of this request (at most the server's); when spent the "
        "answer ends before the term with finish_reason content_filter.")
    evasion_guard: EvasionGuard | None = Field(
        None, description="substring: once a term caused a rollback, it is also matched as a substring for the rest "
        "of the answer (glued and _-joined forms); edit: also with one edit of tolerance (terms of 5+ letters); "
        "off: terms keep their own match mode. Omitted = the server's.")
    obfuscation: ObfuscationSetting | None = None
    speculative: bool = Field(
        True, description="false: no speculative decoding for this request (the server's "
        "GUARDRAIL_SPECULATIVE_TOKENS otherwise; the answer is the same either way, only the speed differs).")

    def request_terms(self) -> list[TermItem]:
        return [*(self.banned_terms or []), *(self.bad_words or []), *(self.banned_strings or [])]

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    def logprobs_count(self) -> int | None:
        """``SamplingParams.logprobs`` of the request: ``None`` where the endpoint reports no logprobs."""
        return None

    def ignored_fields(self) -> list[str]:
        """Fields of the request this service does not know and ignores (logged, capped, as vLLM does), in the
        body's order."""
        return [name for name in self.model_extra or {} if name not in self.refused_fields]

    def structured_output(self) -> StructuredOutput | None:
        """What the answer must be (``None``: free text); the endpoints that take ``response_format`` say.

        Raises:
            ValueError: naming the field (``response_format: ...``, ``guided_json: ...``).
        """
        return None

    def structured_output_field(self) -> str:
        """The request field that carries the structured output (errors name it)."""
        return "guided_json" if getattr(self, "guided_json", None) is not None else "response_format"

    def unsupported_field(self) -> str | None:
        """The first field in :attr:`refused_fields` that the request sets, if any (an endpoint's request
        type adds its own declared fields; :func:`service.generation.reject_unsupported` answers 400)."""
        given = self.model_extra or {}
        for name in sorted(self.refused_fields):
            if is_set(given.get(name)):
                return name
        return None


class ContentPart(BaseModel):
    """One part of a message's content; only ``{"type": "text", "text": ...}`` is supported."""

    model_config = ConfigDict(extra="ignore")

    type: str
    text: Text | None = None

    @model_validator(mode="after")
    def _text_only(self) -> ContentPart:
        # Dropping an image or audio part would answer a different question than the one asked.
        if self.type != "text":
            raise ValueError(f"content parts of type {self.type!r} are not supported (only 'text')")
        if self.text is None:
            raise ValueError("a text content part needs a 'text' string")
        return self


class FunctionCall(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: Text = Field(min_length=1, max_length=64)
    arguments: Text = Field(description="The arguments as a JSON string (OpenAI's shape).")


class MessageToolCall(BaseModel):
    """A tool call an earlier assistant turn made (``messages[i].tool_calls[j]``)."""

    model_config = ConfigDict(extra="ignore")

    id: Text | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Role
    content: Text | list[ContentPart] | None = None
    name: Text | None = None
    tool_calls: list[MessageToolCall] | None = Field(None, description="An assistant turn's tool calls.")
    tool_call_id: Text | None = Field(None, description="A tool message: the call it answers.")

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text or "" for part in self.content)


class FunctionDefinition(OpenObject):

    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")]
    description: Text | None = None
    parameters: dict[str, Any] | None = Field(None, description="A JSON Schema object.")
    strict: bool | None = None


class ToolDefinition(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(BaseModel):
    name: Text


class NamedToolChoice(BaseModel):
    """``{"type": "function", "function": {"name": ...}}``: the answer must call this function."""

    type: Literal["function"]
    function: NamedFunction


class ChatCompletionRequest(GenerationFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1, description="OpenAI's newer name for max_tokens.")
    tools: list[ToolDefinition] | None = Field(None, max_length=128, description="Functions the model may call.")
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = Field(
        None, description="none: no call (tools not shown to the model); auto (default with tools): the model "
        "decides; required / a named function: the answer is made to begin a call (or that function's call).")
    parallel_tool_calls: bool | None = Field(None, description="false: at most one call is returned.")
    response_format: dict[str, Any] | None = Field(None, description=RESPONSE_FORMAT_DOC)
    guided_json: dict[str, Any] | str | None = Field(None, description=GUIDED_JSON_DOC)
    logprobs: bool | None = Field(
        None, description="true: choices[].logprobs.content holds the log-probability of every delivered token "
        "(never of a rolled-back one), from the model's raw distribution.")
    top_logprobs: int | None = Field(
        None, ge=0, le=MAX_TOP_LOGPROBS, description="With logprobs: true, the most likely alternatives at each "
        "position (tokens whose text is, or there completes, a banned term are left out).")

    def token_limit(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    def structured_output(self) -> StructuredOutput | None:
        return structured_output(self.response_format, self.guided_json)

    def logprobs_count(self) -> int | None:
        """``SamplingParams.logprobs``: ``None`` (not asked) or the alternatives per position.

        Raises:
            ValueError: ``top_logprobs`` without ``logprobs: true`` (OpenAI's rule), starting with the field.
        """
        if not self.logprobs:
            if self.top_logprobs is not None:
                raise ValueError("top_logprobs: needs logprobs: true")
            return None
        return self.top_logprobs or 0

    def unsupported_field(self) -> str | None:
        return unknown_response_format(self.response_format) or super().unsupported_field()


class CompletionRequest(GenerationFields):
    prompt: Text | Annotated[list[Text], Field(min_length=1, max_length=1)] | Annotated[
        list[Annotated[int, Field(ge=0)]], Field(min_length=1)
    ] = Field(description="A string, a list holding one string, or a list of token ids.")
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = Field(None, ge=1)
    response_format: dict[str, Any] | None = Field(None, description=RESPONSE_FORMAT_DOC)
    guided_json: dict[str, Any] | str | None = Field(None, description=GUIDED_JSON_DOC)
    logprobs: int | None = Field(
        None, ge=0, le=MAX_TOP_LOGPROBS, strict=True, description="The log-probability of every delivered token "
        "(never of a rolled-back one) and this many alternatives at each position.")

    def token_limit(self) -> int | None:
        return self.max_tokens

    def structured_output(self) -> StructuredOutput | None:
        return structured_output(self.response_format, self.guided_json)

    def logprobs_count(self) -> int | None:
        """``SamplingParams.logprobs``: ``None`` (not asked) or the alternatives per position."""
        return self.logprobs

    def unsupported_field(self) -> str | None:
        if self.echo:
            return "echo"
        if self.suffix:
            return "suffix"
        if self.best_of not in (None, 1):
            return "best_of"
        return unknown_response_format(self.response_format) or super().unsupported_field()


FinishReason = Literal["stop", "length", "content_filter", "tool_calls"]


class PromptTokensDetails(BaseModel):
    cached_tokens: int = Field(description="Prompt tokens served from the prefix cache.")


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    rollbacks: int = Field(description="Rollbacks caused by banned terms (extension).")
    forward_passes: int = Field(description="Model forward passes (extension).")
    reprefills: int = Field(description="Rollbacks that re-prefilled the KV cache (extension).")
    draft_tokens: int = Field(description="Tokens drafted and verified (speculative decoding; extension).")
    accepted_draft_tokens: int = Field(description="Drafted tokens accepted (extension).")
    prompt_tokens_details: PromptTokensDetails


class GuardRecord(BaseModel):
    """Why a choice's answer was changed or cut (extension ``guardrail`` on each choice): word-list names and
    counts, never the terms."""

    rollbacks: int = Field(description="Rollbacks of this choice (banned-term hits that made the decoder re-pick).")
    lists: dict[str, int] = Field(description="Rollbacks by word list (``request``: the request's own terms).")
    filtered_by: str | None = Field(
        description="With finish_reason content_filter: the list whose term the answer was cut before when the "
        "rollback budget ran out; null otherwise (and when every candidate token was banned).")


class ResponseToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None = Field(description="null when the answer only called tools.")
    refusal: None = Field(None, description="Always null: the guard changes answers, it does not refuse them.")
    tool_calls: list[ResponseToolCall] | None = None


class TopLogprob(BaseModel):
    token: str
    logprob: float = Field(description="Natural log; -9999.0 stands for a probability of 0 (OpenAI's value).")
    bytes: list[int] | None


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChoiceLogprobs(BaseModel):
    content: list[TokenLogprob] | None = Field(description="One record per delivered token, in order.")
    refusal: None = None


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    logprobs: ChoiceLogprobs | None = None
    finish_reason: FinishReason
    guardrail: GuardRecord


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    system_fingerprint: str
    choices: list[ChatChoice]
    usage: Usage


class CompletionLogprobs(BaseModel):
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]]
    text_offset: list[int] = Field(description="Character offset of each token in the choice's text.")


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: FinishReason
    guardrail: GuardRecord


class TextCompletion(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    system_fingerprint: str
    choices: list[CompletionChoice]
    usage: Usage
