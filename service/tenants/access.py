"""Who is calling ``/v1`` and what they may do: the tenant of a request's API key (or the anonymous
policy), its rate limits, and the tenant directory built once per process.

A bearer token written as a tenant key (``grk_…``) must be a live key: unknown, rotated away or revoked is a
401. The admin token (``GUARDRAIL_ADMIN_TOKEN``) is a client too, with the server's settings and every list
readable (:func:`may_read_list`). When ``GUARDRAIL_API_KEYS`` is set, any other token, and no token, is a 401;
each of those keys gets the anonymous policy with a rate-limit bucket of its own (keyed by a hash of the key).
When it is not set, a request without a token, or with any other token (the official ``openai`` client always
sends one, so a 401 would refuse every anonymous ``openai`` client), gets the anonymous policy, unless
``GUARDRAIL_ALLOW_ANONYMOUS=false`` (401). The anonymous policy is built from the ``GUARDRAIL_ANONYMOUS_*``
settings (:func:`service.tenants.policy.anonymous_policy`): its floors hold for static-key holders too.

Who may read a stored list's terms (:func:`may_read_list`): the admin token, anyone for the bundled lists and a
request's own terms, a tenant for the lists of its ``own_wordlists``. A tenant key also manages its own lists
through ``/admin/wordlists`` (:func:`require_list_access`); every other admin route needs the admin token.

Keys are looked up in the store on every request (one Redis round trip per request with Redis, off the event
loop: the dependency is synchronous, FastAPI runs it in its thread pool), never cached, so a revoked key is
refused by every replica from the moment the revoke is acknowledged.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from guardrail.wordlists.wordlist import bundled_names
from service.auth import matches_any, require_admin, token_id
from service.errors import ApiError
from service.settings import Settings
from service.stores.store import StoreUnavailable, WordListStore
from service.tenants.keys import is_tenant_key, key_hash
from service.tenants.labels import ADMIN, ANONYMOUS, TenantLabels
from service.tenants.policy import TenantPolicy, anonymous_policy
from service.tenants.ratelimit import RateLimits
from service.tenants.store import EmbeddedTenantStore, RedisTenantStore, TenantChange, TenantRecord, TenantStore

log = logging.getLogger("guardrail.service.tenants")

_CHALLENGE = {"WWW-Authenticate": "Bearer"}
#: The list that carries a request's own terms (``service.runtime.REQUEST_LIST``): the caller wrote them.
_REQUEST_LIST = "request"
_list_bearer = HTTPBearer(auto_error=False, scheme_name="AdminTokenOrTenantKey",
                          description="GUARDRAIL_ADMIN_TOKEN, or a tenant key (grk_...) for the lists it owns")


@dataclass(frozen=True)
class Caller:
    """The client of one request.

    Attributes:
        tenant: the tenant's name, or ``"anonymous"``.
        label: the ``tenant`` label of its metrics (bounded: :mod:`service.tenants.labels`).
        policy: what it may do (rate limits included; the anonymous ones come from the settings).
        admin: the admin token was presented.
        bucket: the key of its rate-limit counters when not ``tenant`` (a ``GUARDRAIL_API_KEYS`` key's
            ``apikey:`` + 32 hex digits of its SHA-256: each static key counts alone).
    """

    tenant: str
    label: str
    policy: TenantPolicy
    admin: bool = False
    bucket: str | None = None

    @property
    def anonymous(self) -> bool:
        return self.tenant == ANONYMOUS

    @property
    def rate_key(self) -> str:
        """The key its requests and tokens are counted under."""
        return self.bucket or self.tenant


@functools.cache
def _bundled() -> frozenset[str]:
    return frozenset(bundled_names())


def may_read_list(caller: Caller | None, list_name: str, *, admin: bool) -> bool:
    """Whether ``caller`` may read the terms of ``list_name``: with the admin token (``admin``) any list; anyone
    the bundled lists (public data) and ``request`` (a request's own terms); a tenant the lists of its
    ``own_wordlists``. What it may not read is never shown to it: ``/v1/check`` gives such a match's list and
    span without the term, ``/admin/wordlists`` answers 404 as for a list that does not exist.
    """
    if admin or (caller is not None and caller.admin):
        return True
    if list_name == _REQUEST_LIST or list_name in _bundled():
        return True
    return caller is not None and not caller.anonymous and list_name in caller.policy.own_wordlists


@dataclass(frozen=True)
class ListAccess:
    """Who calls ``/admin/wordlists``: the admin (every list), or a tenant (its ``own_wordlists``, and the
    bundled lists read-only).

    Attributes:
        admin: the admin token was presented.
        caller: the tenant, when a tenant key was.
        token_id: what the audit log records: 12 hex digits of the token's SHA-256 (a tenant key's ``key_id``).
    """

    admin: bool
    caller: Caller | None
    token_id: str

    def may_read(self, name: str) -> bool:
        return may_read_list(self.caller, name, admin=self.admin)

    def may_write(self, name: str) -> bool:
        return self.admin or (self.caller is not None and name in self.caller.policy.own_wordlists)

    def check_read(self, name: str) -> None:
        """Raises ApiError 404 (as for a list that does not exist) when the caller may not read ``name``."""
        if not self.may_read(name):
            raise ApiError(404, f"word list {name!r} does not exist", param="name", code="wordlist_not_found")

    def check_write(self, name: str) -> None:
        """Raises ApiError 404 when the caller may not read ``name``, 403 when it may read but not change it."""
        self.check_read(name)
        if not self.may_write(name):
            raise ApiError(403, f"word list {name!r} is read-only for this API key (a tenant changes only the "
                           "lists of its own_wordlists)", param="name", code="not_allowed")


def require_list_access(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_list_bearer)]
) -> ListAccess:
    """FastAPI dependency of the ``/admin/wordlists`` routes: the admin token, or a tenant key (synchronous:
    the key is looked up in the store from FastAPI's thread pool).

    Raises:
        ApiError: 401 for a tenant key that is not live; 503 when the store cannot be asked about it; for any
            other token, what :func:`service.auth.require_admin` raises.
    """
    if credentials is not None and is_tenant_key(credentials.credentials):
        caller = request.app.state.tenants.identify(credentials.credentials)
        return ListAccess(False, caller, token_id(credentials.credentials))
    return ListAccess(True, None, require_admin(request, credentials))


def caller_of(request: Request) -> Caller | None:
    """The caller :func:`service.auth.require_client` identified for this request (None on other routes)."""
    return getattr(request.state, "caller", None)


def rate_limited(retry_after_s: int, what: str) -> ApiError:
    """The 429 of a rate limit (OpenAI's ``rate_limit_exceeded``), with ``Retry-After``."""
    return ApiError(429, f"Rate limit reached: {what}. Retry after {retry_after_s} s.", code="rate_limit_exceeded",
                    headers={"Retry-After": str(retry_after_s)})


class Tenants:
    """The tenant directory, rate limits and metric labels of one process.

    Args:
        settings: ``allow_anonymous``, ``api_keys``, ``anonymous_*`` (the anonymous policy and its rate limits),
            ``tenant_metric_labels``.
        store: the word-list store; tenants live beside it (Redis, or files in its data directory).
        store_up: whether the store answered at its last poll (the catalog's health).
    """

    def __init__(self, settings: Settings, store: WordListStore, store_up: Callable[[], bool]) -> None:
        self.settings = settings
        client = getattr(store, "client", None)
        self.store: TenantStore
        if store.kind == "redis" and client is not None:
            self.store = RedisTenantStore(client, settings.redis_prefix, settings.audit_max_records)
        else:
            self.store = EmbeddedTenantStore(settings.data_dir, settings.audit_max_records)
        self.limits = RateLimits(client if store.kind == "redis" else None, settings.redis_prefix, store_up)
        self.labels = TenantLabels(settings.tenant_metric_labels)
        # Only a shared store can be down; while it is known to be, a key is refused at once (no timeout wait).
        self._store_up = store_up if isinstance(self.store, RedisTenantStore) else (lambda: True)
        self.anonymous_policy = anonymous_policy(
            required_wordlists=settings.anonymous_required_wordlists,
            min_obfuscation=settings.anonymous_min_obfuscation,
            evasion_guard_off=settings.anonymous_evasion_guard_off, server_evasion_guard=settings.evasion_guard,
            request_terms=settings.anonymous_request_terms)
        self.anonymous = Caller(ANONYMOUS, ANONYMOUS, self.anonymous_policy)
        self.admin = Caller(ADMIN, ADMIN, TenantPolicy(), admin=True)

    # -- who is calling ----------------------------------------------------------------------------
    def identify(self, token: str | None) -> Caller:
        """The caller presenting ``token`` (the bearer token, None without one): a tenant, the admin (the admin
        token), or anonymous.

        Raises:
            ApiError: 401 ``invalid_api_key`` for a tenant key that is not live, or a missing/other token
                when anonymous requests are off; 503 when the store cannot be asked about a tenant key.
        """
        if token is not None and is_tenant_key(token):
            try:
                if not self._store_up():
                    raise StoreUnavailable("the store did not answer at its last poll")
                record = self.store.by_key_hash(key_hash(token))
            except StoreUnavailable as exc:
                raise ApiError(503, f"the tenant store is unavailable ({exc}); retry", code="store_unavailable",
                               headers={"Retry-After": "1"}) from None
            if record is None:
                raise ApiError(401, "Incorrect API key: unknown, rotated or revoked.", code="invalid_api_key",
                               headers=_CHALLENGE)
            if record.previous_key_hash is not None and record.key_hash == key_hash(token):
                self._retire_previous(record)
            return Caller(record.name, self.labels.label(record.name), record.policy)
        admin_token = self.settings.admin_token
        if token is not None and admin_token is not None and matches_any(token, [admin_token]):
            return self.admin
        static = self.settings.api_keys
        if static:
            if token is None or not matches_any(token, static):
                raise ApiError(401, "Incorrect or missing API key.", code="invalid_api_key", headers=_CHALLENGE)
            return Caller(ANONYMOUS, ANONYMOUS, self.anonymous_policy, bucket="apikey:" + key_hash(token)[:32])
        if not self.settings.allow_anonymous:
            raise ApiError(401, "An API key is required (Authorization: Bearer <key>); anonymous requests are "
                           "disabled on this server.", code="invalid_api_key", headers=_CHALLENGE)
        return self.anonymous

    def _retire_previous(self, record: TenantRecord) -> None:
        """The new key of ``record`` is in use: the key before the rotate is refused from now on (best
        effort: when the store does not answer, the next request with the new key retires it)."""
        live = record.key_hash

        def compute(current: TenantRecord | None) -> TenantChange | None:
            if current is None or current.key_hash != live or current.previous_key_hash is None:
                return None  # retired, rotated or revoked meanwhile
            return TenantChange(replace(current, previous_key_hash=None), "retire")

        try:
            self.store.write(record.name, compute, None)
        except StoreUnavailable as exc:  # WriteOutcomeUnknown included: retried at the next request
            log.warning("the previous key of a rotated tenant could not be retired yet: %s", exc,
                        extra={"tenant": record.name})

    # -- rate limits -------------------------------------------------------------------------------
    def _limits(self, caller: Caller) -> tuple[int | None, int | None]:
        if caller.anonymous:
            return (self.settings.anonymous_requests_per_minute or None,
                    self.settings.anonymous_tokens_per_minute or None)
        return caller.policy.requests_per_minute, caller.policy.tokens_per_minute

    def admit_request(self, caller: Caller) -> None:
        """Count one request of ``caller`` (blocking: call it off the event loop).

        Raises:
            ApiError: 429 with ``Retry-After`` over ``requests_per_minute``.
        """
        per_minute = self._limits(caller)[0]
        if per_minute is not None:
            wait = self.limits.hit_request(caller.rate_key, per_minute)
            if wait is not None:
                raise rate_limited(wait, f"{per_minute} requests per minute")

    def admit_tokens(self, caller: Caller, tokens: int) -> None:
        """Count ``tokens`` (prompt + n x max_tokens) of ``caller`` (blocking: call it off the event loop).

        Raises:
            ApiError: 400 naming ``max_tokens`` when the request alone needs more than ``tokens_per_minute``
                (it could never pass), 429 with ``Retry-After`` when the last minute's tokens leave no room.
        """
        per_minute = self._limits(caller)[1]
        if per_minute is None:
            return
        if tokens > per_minute:
            raise ApiError(400, f"the request needs {tokens} tokens (prompt + n x max_tokens), more than this API "
                           f"key's {per_minute} tokens per minute; lower max_tokens", param="max_tokens",
                           code="invalid_value")
        wait = self.limits.hit_tokens(caller.rate_key, per_minute, tokens)
        if wait is not None:
            raise rate_limited(wait, f"{per_minute} tokens per minute")
