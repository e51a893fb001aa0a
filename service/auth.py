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

from service.admin_throttle import AdminFailures
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
        ApiError: 429 with ``Retry-After`` while the client's address is throttled for failed attempts
            (:mod:`service.admin_throttle`); 403 when the admin API is disabled (no ``GUARDRAIL_ADMIN_TOKEN``),
            401 without a bearer token, 403 with a wrong one (counted as a failed attempt).
    """
    configured: SecretStr | None = request.app.state.settings.admin_token
    address = _address(request)
    wait = _failures(request).retry_after_s(address)
    if wait is not None:
        raise ApiError(429, f"Too many failed admin-token attempts from this address. Retry after {wait} s.",
                       code="rate_limit_exceeded", headers={"Retry-After": str(wait)})
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
        _failures(request).failed(address)
        raise ApiError(403, "Invalid admin token.", code="invalid_token")
    return token_id(credentials.credentials)


def is_admin(request: Request) -> bool:
    """Whether the request carries the admin token as its bearer token (no error either way; a wrong token
    counts as a failed attempt of its address, and a throttled address is never the admin)."""
    configured: SecretStr | None = request.app.state.settings.admin_token
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if configured is None or scheme.lower() != "bearer" or not token:
        return False
    address = _address(request)
    failures = _failures(request)
    if failures.retry_after_s(address) is not None:
        return False
    if matches_any(token.strip(), [configured]):
        return True
    failures.failed(address)
    return False


def _address(request: Request) -> str:
    return request.client.host if request.client is not None else "unknown"


def _failures(request: Request) -> AdminFailures:
    return request.app.state.admin_failures


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
