"""Bodies of ``POST /v1/moderations``: OpenAI's moderations request and answer, over the guard's word lists."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from service.schemas.check import MAX_CHECK_CHARS
from service.schemas.terms import ObfuscationSetting, TermItem, TermText
from service.schemas.text import Text

#: Inputs of one request at most (each up to ``MAX_CHECK_CHARS``; the body limit bounds the total).
MAX_MODERATION_INPUTS = 64
#: ``model`` of an answer to a request that names none.
DEFAULT_MODEL = "guardrail-wordlists"


class ModerationRequest(BaseModel):
    # OpenAI's moderations request has two fields; unknown ones are a mistake worth a 400 naming them.
    model_config = ConfigDict(extra="forbid")

    input: Annotated[Text, Field(max_length=MAX_CHECK_CHARS)] | Annotated[
        list[Annotated[Text, Field(max_length=MAX_CHECK_CHARS)]], Field(min_length=1, max_length=MAX_MODERATION_INPUTS)
    ] = Field(description="A text, or texts (one result each). Image inputs are not supported.")
    model: Text | None = Field(None, max_length=256, description="Echoed in the answer; the lists decide, not a "
                               "model (omni-moderation-latest and the like are accepted).")
    # -- extensions, as on /v1/check --------------------------------------------------------------------------
    wordlists: list[Annotated[Text, Field(min_length=1, max_length=64)]] | None = Field(
        None, max_length=64, description="Lists to scan with (the categories); omitted = the default set.")
    banned_terms: list[TermItem] | None = Field(None, description="Extra terms, category 'request'.")
    bad_words: list[TermText] | None = Field(None, description="Alias of banned_terms (strings).")
    obfuscation: ObfuscationSetting | None = None

    def inputs(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else list(self.input)

    def request_terms(self) -> list[TermItem]:
        return [*(self.banned_terms or []), *(self.bad_words or [])]


class ModerationResult(BaseModel):
    flagged: bool = Field(description="A term of some list occurs in the input.")
    categories: dict[str, bool] = Field(description="By word-list name ('request': the request's own terms): "
                                        "whether one of its terms occurs. The terms are never returned.")
    category_scores: dict[str, float] = Field(description="By list: 1.0 when flagged, else 0.0 (a match is certain).")
    category_applied_input_types: dict[str, list[str]] = Field(description="By list: ['text'].")


class ModerationResponse(BaseModel):
    id: str
    model: str
    results: list[ModerationResult] = Field(description="One per input, in order.")
