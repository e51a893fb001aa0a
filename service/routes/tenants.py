"""The tenant admin API: create, read, list, change the policy, rotate and revoke keys, delete; the tenant
audit log. Every route needs the admin bearer token (:func:`service.auth.require_admin`) and every change is
audited with the admin token's id, as list edits are. A key is in the answer to a create or a rotate only,
once; the store keeps its SHA-256.

A rotate or revoke takes effect on every replica when it is acknowledged: requests look their key up in the
store each time (:mod:`service.tenants.access`). A rotate keeps the previous key valid until the new one is
first used, so that a rotate whose answer is lost (the store stopped answering after the commit) never locks
the tenant out; a revoke ends every key at once (revoke, then rotate: the way to end a leaked key now). A write
whose outcome the store cannot tell is a 503 ``write_outcome_unknown``, never "nothing was changed"
(docs/service.md "Writes and their outcome"). ``PUT .../policy`` takes ``If-Match`` (the tenant's ``etag``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Path, Query, Request, Response

from guardrail.wordlists.wordlist import bundled_names
from service.auth import require_admin
from service.deps import RuntimeDep
from service.errors import ApiError
from service.runtime import Runtime
from service.schemas.tenants import TenantAuditLog, TenantAuditOut, TenantIn, TenantIndex, TenantOut, TenantWithKey
from service.stores.store import (
    NAME_PATTERN,
    Precondition,
    PreconditionFailed,
    StoreUnavailable,
    WriteConflict,
    WriteOutcomeUnknown,
)
from service.tenants.access import Tenants
from service.tenants.keys import key_hash, new_key
from service.tenants.labels import RESERVED_NAMES
from service.tenants.policy import TenantPolicy
from service.tenants.store import TenantChange, TenantRecord, rotated

_ERRORS = {
    401: {"description": "No bearer token."},
    403: {"description": "Wrong token, or the admin API is disabled (GUARDRAIL_ADMIN_TOKEN unset)."},
    503: {"description": "The store does not answer."},
}
_NOT_FOUND = {404: {"description": "No such tenant."}}
router = APIRouter(tags=["tenants"], responses=_ERRORS)

TokenId = Annotated[str, Depends(require_admin)]
TenantName = Annotated[str, Path(pattern=NAME_PATTERN, description="The tenant's name.")]


class _NotFound(Exception):
    pass


class _Exists(Exception):
    pass


def _tenants(request: Request) -> Tenants:
    return request.app.state.tenants


TenantsDep = Annotated[Tenants, Depends(_tenants)]


@contextmanager
def _store_errors(name: str | None = None) -> Iterator[None]:
    """Translate store errors (and the routes' own aborts) into HTTP answers."""
    try:
        yield
    except _NotFound:
        raise ApiError(404, f"tenant {name!r} does not exist", param="name", code="tenant_not_found") from None
    except _Exists:
        raise ApiError(409, f"tenant {name!r} exists; rotate its key or change its policy instead", param="name",
                       code="tenant_exists") from None
    except PreconditionFailed as exc:
        headers = {"ETag": exc.etag} if exc.etag else {}
        raise ApiError(412, str(exc), param="If-Match", code="precondition_failed", headers=headers) from None
    except WriteConflict as exc:
        raise ApiError(409, str(exc), param="name", code="write_conflict", headers={"Retry-After": "1"}) from None
    except WriteOutcomeUnknown as exc:
        raise ApiError(503, f"{exc}. A rotate leaves the previous key valid either way", code="write_outcome_unknown",
                       headers={"Retry-After": "1"}) from None
    except StoreUnavailable as exc:
        raise ApiError(503, f"tenant store unavailable ({exc}); nothing was changed", code="store_unavailable",
                       headers={"Retry-After": "1"}) from None


def _check_lists(runtime: Runtime, policy: TenantPolicy, param: str) -> None:
    """Every list the policy enforces or allows exists now (a typo would otherwise fail each of the tenant's
    requests); the lists it owns need not (the tenant creates them), but may not be bundled lists or lists of the
    server's default set.

    Raises:
        ApiError: 400 naming ``<param>.<field>.<index>``.
    """
    for field in ("default_wordlists", "allowed_wordlists", "required_wordlists"):
        for index, name in enumerate(getattr(policy, field) or []):
            if runtime.catalog.get(name) is None:
                raise ApiError(400, f"word list {name!r} does not exist", param=f"{param}{field}.{index}",
                               code="wordlist_not_found")
    bundled = set(bundled_names())
    for index, name in enumerate(policy.own_wordlists):
        if name in bundled or name in runtime.default_wordlists:
            raise ApiError(400, f"word list {name!r} is a bundled list or in the server's default set: it serves "
                           "every caller and only the admin changes it", param=f"{param}own_wordlists.{index}",
                           code="invalid_value")


@router.get("/admin/tenants", response_model=TenantIndex, summary="List the tenants (never their keys)")
def list_tenants(_: TokenId, tenants: TenantsDep) -> TenantIndex:
    with _store_errors():
        records = tenants.store.all()
    return TenantIndex(data=[TenantOut.of(r) for r in records])


@router.post("/admin/tenants", response_model=TenantWithKey, status_code=201,
             summary="Create a tenant; the answer holds its API key, shown this once",
             responses={409: {"description": "The tenant exists."}})
def create_tenant(body: TenantIn, token_id: TokenId, tenants: TenantsDep, runtime: RuntimeDep) -> TenantWithKey:
    if body.name in RESERVED_NAMES:
        raise ApiError(400, f"{body.name!r} is reserved (a metrics label of its own)", param="name",
                       code="invalid_value")
    _check_lists(runtime, body.policy, "policy.")
    key = new_key()

    def compute(current: TenantRecord | None) -> TenantChange:
        if current is not None:
            raise _Exists
        return TenantChange(TenantRecord(body.name, body.policy, key_hash(key)), "create")

    with _store_errors(body.name):
        record = tenants.store.write(body.name, compute, token_id)
    assert record is not None
    return TenantWithKey(**TenantOut.of(record).model_dump(), api_key=key)


@router.get("/admin/tenants/{name}", response_model=TenantOut, summary="Read a tenant", responses=_NOT_FOUND)
def get_tenant(name: TenantName, _: TokenId, tenants: TenantsDep, response: Response) -> TenantOut:
    with _store_errors(name):
        record = tenants.store.get(name)
        if record is None:
            raise _NotFound
    response.headers["ETag"] = record.etag
    return TenantOut.of(record)


@router.put("/admin/tenants/{name}/policy", response_model=TenantOut, summary="Replace a tenant's policy",
            responses={**_NOT_FOUND, 412: {"description": "Stale If-Match."}})
def put_policy(name: TenantName, body: TenantPolicy, token_id: TokenId, tenants: TenantsDep,
               runtime: RuntimeDep, response: Response,
               if_match: Annotated[str | None, Header(description='The tenant\'s etag ("v<version>-<digest>"), '
                                                       "or *; 412 when it changed meanwhile")] = None) -> TenantOut:
    _check_lists(runtime, body, "")
    precondition = None
    if if_match is not None:
        try:
            precondition = Precondition.if_match(if_match)
        except ValueError as exc:
            raise ApiError(400, str(exc), param="If-Match", code="invalid_value") from None

    def compute(current: TenantRecord | None) -> TenantChange:
        if current is None:
            raise _NotFound
        if precondition is not None and not precondition.holds(current.version, _digest_of(current.etag)):
            raise PreconditionFailed(name, current.version, current.etag, what="tenant")
        return TenantChange(TenantRecord(name, body, current.key_hash, previous_key_hash=current.previous_key_hash),
                            "update")

    with _store_errors(name):
        record = tenants.store.write(name, compute, token_id)
    assert record is not None
    response.headers["ETag"] = record.etag
    return TenantOut.of(record)


def _digest_of(etag: str) -> str:
    """The digest part of an entity tag of this service (``"v3-<digest>"``)."""
    return etag.strip('"').partition("-")[2]


@router.post("/admin/tenants/{name}/rotate", response_model=TenantWithKey,
             summary="Issue a new key (shown this once); the previous one is refused from the new one's first use",
             responses=_NOT_FOUND)
def rotate_key(name: TenantName, token_id: TokenId, tenants: TenantsDep) -> TenantWithKey:
    key = new_key()

    def compute(current: TenantRecord | None) -> TenantChange:
        if current is None:
            raise _NotFound
        return TenantChange(rotated(current, key_hash(key)), "rotate")

    with _store_errors(name):
        record = tenants.store.write(name, compute, token_id)
    assert record is not None
    return TenantWithKey(**TenantOut.of(record).model_dump(), api_key=key)


@router.post("/admin/tenants/{name}/revoke", response_model=TenantOut,
             summary="Revoke the tenant's key at once (the tenant and its policy stay; rotate issues a new key)",
             responses=_NOT_FOUND)
def revoke_key(name: TenantName, token_id: TokenId, tenants: TenantsDep) -> TenantOut:
    def compute(current: TenantRecord | None) -> TenantChange | None:
        if current is None:
            raise _NotFound
        if current.key_hash is None and current.previous_key_hash is None:
            return None  # already revoked: nothing to change, nothing to audit
        return TenantChange(TenantRecord(name, current.policy, None), "revoke")

    with _store_errors(name):
        record = tenants.store.write(name, compute, token_id)
    assert record is not None
    return TenantOut.of(record)


@router.delete("/admin/tenants/{name}", status_code=204, summary="Delete a tenant and its key",
               responses=_NOT_FOUND)
def delete_tenant(name: TenantName, token_id: TokenId, tenants: TenantsDep) -> Response:
    def compute(current: TenantRecord | None) -> TenantChange:
        if current is None:
            raise _NotFound
        return TenantChange(None, "delete")

    with _store_errors(name):
        tenants.store.write(name, compute, token_id)
    return Response(status_code=204)


@router.get("/admin/audit/tenants", response_model=TenantAuditLog, summary="Tenant changes, newest first")
def tenant_audit(_: TokenId, tenants: TenantsDep,
                 limit: Annotated[int, Query(ge=1, le=1000, description="Records to return.")] = 100) -> TenantAuditLog:
    with _store_errors():
        records = tenants.store.audit(limit)
    return TenantAuditLog(data=[TenantAuditOut.of(r) for r in records])
