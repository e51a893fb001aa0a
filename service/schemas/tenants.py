"""Bodies of the tenant admin API (``/admin/tenants``, ``/admin/audit/tenants``). No body ever holds a key
except the answer to a create or a rotate (``api_key``, shown once)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from service.schemas.envelope import ListOf
from service.stores.store import NAME_PATTERN
from service.tenants.policy import TenantPolicy
from service.tenants.store import TenantAuditRecord, TenantRecord


class TenantIn(BaseModel):
    """A new tenant (POST): its name and policy."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME_PATTERN, description="1-64 of A-Z a-z 0-9 _ . - (not first: . _ -); not "
                      "'anonymous', 'admin', 'other' or 'none'. The metrics label and log field of its requests.")
    policy: TenantPolicy = Field(default_factory=TenantPolicy)


class TenantOut(BaseModel):
    name: str
    key_id: str | None = Field(description="12 hex digits of the live key's SHA-256; null once revoked.")
    previous_key_id: str | None = Field(default=None, description="The key before the last rotate while it is "
                                        "still valid: until the new key is first used, or a revoke.")
    revoked: bool
    version: int
    etag: str = Field(default="", description='"v<version>-<digest>": the If-Match of a policy PUT.')
    created_at: float = Field(description="Unix time, seconds.")
    updated_at: float = Field(description="Unix time, seconds.")
    policy: TenantPolicy

    @classmethod
    def of(cls, record: TenantRecord) -> TenantOut:
        return cls(name=record.name, key_id=record.key_id, previous_key_id=record.previous_key_id,
                   revoked=record.key_hash is None, version=record.version, etag=record.etag,
                   created_at=record.created_at, updated_at=record.updated_at, policy=record.policy)


class TenantWithKey(TenantOut):
    api_key: str = Field(description="The tenant's API key, shown this once: only its SHA-256 is stored. Clients "
                         "send it as 'Authorization: Bearer <key>' (the openai client's api_key).")


class TenantIndex(ListOf[TenantOut]):
    pass


class TenantAuditOut(BaseModel):
    time: float = Field(description="Unix time, seconds.")
    action: Literal["create", "update", "rotate", "retire", "revoke", "delete"]
    tenant: str
    version: int
    key_id: str | None = Field(description="The key concerned (the new one, or the one revoked/deleted).")
    token_id: str | None = Field(description="12 hex digits of the admin token's SHA-256.")

    @classmethod
    def of(cls, record: TenantAuditRecord) -> TenantAuditOut:
        return cls(**record.to_dict())


class TenantAuditLog(ListOf[TenantAuditOut]):
    pass
