"""Request and response bodies of ``/v1/chat/completions`` and ``/v1/completions`` (OpenAI's shapes).

Standard fields follow OpenAI's API reference; fields OpenAI has and this service cannot honour
(``tools``, ``logprobs``, non-zero ``presence_penalty`` …) are rejected with a 400 naming them rather than
ignored. Extensions: ``wordlists``, ``banned_terms`` and its aliases ``bad_words`` (vLLM) and
``banned_strings`` (TabbyAPI / exllamav2), ``watermark``, ``max_rollbacks``, plus vLLM's ``top_k``,
``min_p`` and ``repetition_penalty``. Unknown fields are ignored, as OpenAI-compatible servers commonly do.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from service.schemas.terms import TermItem, TermText

Role = Literal["system", "developer", "user", "assistant"]


class StreamOptions(BaseModel):
    include_usage: bool = False


class GenerationFields(BaseModel):
    """Fields shared by chat and text completions."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(description="The served model's id (GET /v1/models).")
    max_tokens: int | None = Field(None, ge=1, description="Completion token limit (capped by the server).")
    temperature: float | None = Field(None, ge=0, le=2, description="0 = greedy.")
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=0, description="vLLM extension; 0 = off.")
    min_p: float | None = Field(None, ge=0, le=1, description="vLLM extension; 0 = off.")
    repetition_penalty: float | None = Field(None, gt=0, le=10, description="vLLM / transformers extension.")
    seed: int | None = Field(None, ge=0, le=2**63 - 1)
    stop: str | Annotated[list[Annotated[str, Field(min_length=1)]], Field(max_length=16)] | None = None
    n: int = Field(1, ge=1, le=16, description="Choices, generated one after another (server limit applies).")
    stream: bool = False
    stream_options: StreamOptions | None = None
    logit_bias: dict[str, Annotated[float, Field(ge=-100, le=100)]] | None = Field(
        None, description="Token id (as a string) -> bias in [-100, 100], added to the logits."
    )
    user: str | None = Field(None, max_length=256)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    logprobs: bool | int | None = None

    # -- extensions -------------------------------------------------------------------------------
    wordlists: list[Annotated[str, Field(min_length=1, max_length=64)]] | None = Field(
        None, max_length=64, description="Word lists to enforce; omitted = the server's default set."
    )
    banned_terms: list[TermItem] | None = Field(None, description="Extra terms for this request only.")
    bad_words: list[TermText] | None = Field(None, description="vLLM's name for banned_terms (strings).")
    banned_strings: list[TermText] | None = Field(None, description="TabbyAPI's name for banned_terms.")
    watermark: bool = Field(False, description="Add a green-list watermark (POST /v1/watermark/detect).")
    max_rollbacks: int | None = Field(
        None, ge=0, description="Rollback budget of this request (at most the server's); when spent the "
        "answer ends before the term with finish_reason content_filter.")

    def request_terms(self) -> list[TermItem]:
        return [*(self.banned_terms or []), *(self.bad_words or []), *(self.banned_strings or [])]

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Role
    content: str | list[ContentPart] | None = None
    name: str | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text or "" for part in self.content if part.type == "text")


class ChatCompletionRequest(GenerationFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1, description="OpenAI's newer name for max_tokens.")
    tools: list[Any] | None = None
    response_format: dict[str, Any] | None = None

    def token_limit(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


class CompletionRequest(GenerationFields):
    prompt: str | Annotated[list[str], Field(min_length=1, max_length=1)] | Annotated[
        list[Annotated[int, Field(ge=0)]], Field(min_length=1)
    ] = Field(description="A string, a list holding one string, or a list of token ids.")
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = Field(None, ge=1)

    def token_limit(self) -> int | None:
        return self.max_tokens


FinishReason = Literal["stop", "length", "content_filter"]


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    rollbacks: int = Field(description="Rollbacks caused by banned terms (extension).")
    forward_passes: int = Field(description="Model forward passes (extension).")
    reprefills: int = Field(description="Rollbacks that re-prefilled the KV cache (extension).")


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    logprobs: None = None
    finish_reason: FinishReason


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: None = None
    finish_reason: FinishReason


class TextCompletion(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage
