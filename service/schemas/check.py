"""Bodies of ``POST /v1/check`` (scan a text against word lists)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from service.schemas.terms import ObfuscationSetting, TermItem, TermText
from service.schemas.text import Text

MAX_CHECK_CHARS = 1_000_000
#: Matches returned at most (the first ones by position); beyond, ``truncated`` is true. Bounds the
#: response: 1 MB of text can hold hundreds of thousands of matches.
MAX_CHECK_MATCHES = 1000


class CheckRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: Text = Field(max_length=MAX_CHECK_CHARS, description="The text to scan, e.g. a user's prompt.")
    wordlists: list[Annotated[Text, Field(min_length=1, max_length=64)]] | None = Field(
        None, max_length=64, description="Lists to scan with; omitted = the default set."
    )
    banned_terms: list[TermItem] | None = Field(None, description="Extra terms for this request only.")
    bad_words: list[TermText] | None = Field(None, description="Alias of banned_terms (strings).")
    obfuscation: ObfuscationSetting | None = None

    def request_terms(self) -> list[TermItem]:
        return [*(self.banned_terms or []), *(self.bad_words or [])]


class CheckMatch(BaseModel):
    term: str | None = Field(description="The term as written in its list; null when the caller may not read the "
                             "list (a stored list other than a bundled one or the tenant's own_wordlists, "
                             "without the admin token): then only the list and the span are given.")
    list: str = Field(description="The list holding the term ('request' for banned_terms).")
    start: int = Field(description="Index of the first character in `text` (code points).")
    end: int = Field(description="Index past the last character (exclusive).")
    text: str = Field(description="text[start:end].")


class ListVersion(BaseModel):
    name: str
    version: int


class CheckResponse(BaseModel):
    flagged: bool
    matches: list[CheckMatch] = Field(description=f"The first {MAX_CHECK_MATCHES} matches by position.")
    match_count: int = Field(description="All matches found (may exceed len(matches)).")
    truncated: bool = Field(description=f"More than {MAX_CHECK_MATCHES} matches: only the first are listed.")
    wordlists: list[ListVersion] = Field(description="The list versions the text was scanned with.")
