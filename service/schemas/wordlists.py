"""Bodies of the admin API (``/admin/wordlists``, ``/admin/audit``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from guardrail.wordlists.wordlist import MatchMode, written_term
from service.schemas.envelope import ListOf
from service.schemas.terms import ObfuscationSetting, TermItem, TermText
from service.stores.store import AuditRecord, StoredWordList, VersionInfo


class WordListIn(BaseModel):
    """A whole list (PUT). Size limits (GUARDRAIL_MAX_LIST_TERMS) are checked by the route: 413 beyond."""

    model_config = ConfigDict(extra="forbid")

    terms: list[TermItem] = Field(description="Banned terms: strings or {text, match, case_sensitive, obfuscation}.")
    allow: list[TermText] = Field(default_factory=list, description="Allow-terms (docs/wordlists.md).")
    obfuscation: ObfuscationSetting | None = Field(
        None, description="The list's obfuscation level (the @obfuscation header; docs/matching.md); omitted = "
        "the request's or the server's.")


class WordListPatch(BaseModel):
    """Terms to add and to remove (PATCH); removal matches the text (case-insensitively for
    case-insensitive terms)."""

    model_config = ConfigDict(extra="forbid")

    add: list[TermItem] = Field(default_factory=list)
    remove: list[TermText] = Field(default_factory=list)


class TermOut(BaseModel):
    text: str = Field(description="As written in a request: re:PATTERN for a regex term (a body can be sent back).")
    match: MatchMode
    case_sensitive: bool
    obfuscation: ObfuscationSetting | None = Field(None,
                                                   description="The term's own obfuscation level, if it sets one.")


class WordListOut(BaseModel):
    name: str
    version: int
    etag: str
    updated_at: float = Field(description="Unix time of the change, seconds.")
    terms: list[TermOut]
    allow: list[str]
    obfuscation: ObfuscationSetting | None = Field(None, description="The list's obfuscation level, if it sets one.")

    @classmethod
    def of(cls, stored: StoredWordList) -> WordListOut:
        wl = stored.wordlist
        return cls(
            name=wl.name,
            version=stored.version,
            etag=stored.etag,
            updated_at=stored.updated_at,
            terms=[TermOut(text=written_term(t), match=t.match, case_sensitive=t.case_sensitive,
                           obfuscation=t.obfuscation) for t in wl.terms],
            allow=list(wl.allow),
            obfuscation=wl.obfuscation,
        )


class WordListSummary(BaseModel):
    name: str
    version: int
    etag: str
    updated_at: float
    terms: int = Field(description="Number of terms.")
    allow: int = Field(description="Number of allow-terms.")
    default: bool = Field(description="Part of this replica's default set (GUARDRAIL_WORDLISTS).")


class WordListIndex(ListOf[WordListSummary]):
    pass


class VersionOut(BaseModel):
    version: int
    updated_at: float = Field(description="Unix time of the change that wrote it, seconds.")
    terms: int = Field(description="Number of terms.")
    allow: int = Field(description="Number of allow-terms.")
    current: bool = Field(description="The list's current version.")

    @classmethod
    def of(cls, info: VersionInfo, current: int | None) -> VersionOut:
        return cls(version=info.version, updated_at=info.updated_at, terms=info.terms, allow=info.allow,
                   current=info.version == current)


class VersionIndex(ListOf[VersionOut]):
    pass


class AuditOut(BaseModel):
    time: float = Field(description="Unix time, seconds.")
    action: Literal["create", "replace", "update", "delete", "seed"]
    list: str
    version: int
    token_id: str | None = Field(description="12 hex digits of the admin token's SHA-256; null for seeds.")
    added: int
    removed: int

    @classmethod
    def of(cls, record: AuditRecord) -> AuditOut:
        return cls(**record.to_dict())


class AuditLog(ListOf[AuditOut]):
    pass
