"""Credentials: the admin bearer token (``GUARDRAIL_ADMIN_TOKEN``), tenant API keys (:mod:`service.tenants`)
and optional shared client keys (``GUARDRAIL_API_KEYS``). Secrets are compared with ``hmac.compare_digest``
(constant time) and never logged; the audit log records a token *id* (a short hash), not the token.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import SecretStr

from service.errors import ApiError

_admin_bearer = HTTPBearer(auto_error=False, scheme_name="AdminToken", description="GUARDRAIL_ADMIN_TOKEN")
_client_bearer = HTTPBearer(auto_error=False, scheme_name="ApiKey",
                            description="a tenant key (grk_...), or one of GUARDRAIL_API_KEYS")

_CHALLENGE = {"WWW-Authenticate": "Bearer"}


def token_id(token: str) -> str:
    """A stable, non-secret identifier of a token for audit records: 12 hex digits of its SHA-256."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()[:12]


def matches_any(presented: str, secrets: Sequence[SecretStr]) -> bool:
    """Whether ``presented`` equals one of ``secrets``; compares against every one (no early exit)."""
    given = presented.encode("utf-8")
    found = False
    for secret in secrets:
        found |= hmac.compare_digest(given, secret.get_secret_value().encode("utf-8"))
    return found


def require_admin(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_admin_bearer)]
) -> str:
    """FastAPI dependency of every /admin route; returns the caller's token id.

    Raises:
        ApiError: 403 when the admin API is disabled (no ``GUARDRAIL_ADMIN_TOKEN``), 401 without a
            bearer token, 403 with a wrong one.
    """
    configured: SecretStr | None = request.app.state.settings.admin_token
    if configured is None:
        raise ApiError(
            403,
            "The admin API is disabled: set the GUARDRAIL_ADMIN_TOKEN environment variable to a secret "
            "and send it as 'Authorization: Bearer <token>'.",
            code="admin_disabled",
        )
    if credentials is None:
        raise ApiError(401, "Missing bearer token (Authorization: Bearer <admin token>).",
                       code="missing_token", headers=_CHALLENGE)
    if not matches_any(credentials.credentials, [configured]):
        raise ApiError(403, "Invalid admin token.", code="invalid_token")
    return token_id(credentials.credentials)


def require_client(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_client_bearer)]
) -> None:
    """FastAPI dependency of the /v1 routes: identifies the caller (a tenant, or anonymous) and counts the
    request against its rate limit. Sets ``request.state.caller`` (:class:`service.tenants.access.Caller`)
    and ``request.state.tenant_label`` (the metrics label). Synchronous on purpose: FastAPI runs it in its
    thread pool, so the store lookup (a Redis round trip) never blocks the event loop.

    Raises:
        ApiError: 401 (OpenAI's ``invalid_api_key``) for an unknown, rotated or revoked tenant key, and
            without a key when anonymous requests are disabled or ``GUARDRAIL_API_KEYS`` is set and the key
            is not one of them; 429 with ``Retry-After`` over the caller's requests per minute; 503 when the
            store cannot be asked about a tenant key.
    """
    tenants = request.app.state.tenants
    caller = tenants.identify(credentials.credentials if credentials is not None else None)
    request.state.caller = caller
    request.state.tenant_label = caller.label
    tenants.admit_request(caller)
