"""The admin API: word lists (list, read, create/replace, add/remove terms, delete, their kept versions) and the
audit log.

Every route takes the admin bearer token (:func:`service.auth.require_admin`); the word-list routes take a
tenant key too (:func:`service.tenants.access.require_list_access`), which reads and writes the lists of its
policy's ``own_wordlists`` and reads the bundled lists; any other list is a 404 to it, as if it did not
exist, so that names do not leak. The audit log is the admin's only. Reads go to the store
(the truth, so an ETag read here is current); a successful write is applied to this replica's
catalog at once and reaches other replicas through the store (hint + version polling). Optimistic
concurrency: ``ETag: "v<version>-<content digest>"`` on reads and writes, ``If-Match`` (412 when stale) and
``If-None-Match: *`` (create only) on writes. A failed write changes nothing: the previous version
keeps serving; a write whose outcome the store cannot tell (Redis stopped answering after the commit and
before its check) is a 503 ``write_outcome_unknown`` that says so (:mod:`service.stores.write_outcome`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Path, Query, Response

from guardrail.matching.regex.automaton import MAX_REGEX_DFA_STATES, check_regex_terms
from guardrail.wordlists.wordlist import WordList, WordListError, parse_wordlist, wordlist_from_terms
from service.auth import require_admin
from service.deps import RuntimeDep
from service.errors import ApiError
from service.request_lists import check_compiles, invalid_term
from service.runtime import Runtime
from service.schemas.terms import to_terms
from service.schemas.wordlists import (
    AuditLog,
    AuditOut,
    VersionIndex,
    VersionOut,
    WordListIn,
    WordListIndex,
    WordListOut,
    WordListPatch,
    WordListSummary,
)
from service.stores.store import (
    NAME_PATTERN,
    Change,
    Precondition,
    PreconditionFailed,
    StoredWordList,
    StoreUnavailable,
    WordListNotFound,
    WriteConflict,
    WriteOutcomeUnknown,
    deletion,
    patched,
    replacement,
)
from service.tenants.access import ListAccess, require_list_access

_ERRORS = {
    401: {"description": "No bearer token, or a tenant key that is not live."},
    403: {"description": "Wrong token, the admin API is disabled (GUARDRAIL_ADMIN_TOKEN unset), or a tenant key "
          "changing a list it does not own."},
    503: {"description": "The word-list store does not answer."},
}
_WRITE_ERRORS = {409: {"description": "The list kept changing during the update (busy): retry."}}
router = APIRouter(prefix="/admin", tags=["admin"], responses=_ERRORS)

TokenId = Annotated[str, Depends(require_admin)]
Access = Annotated[ListAccess, Depends(require_list_access)]
ListName = Annotated[str, Path(pattern=NAME_PATTERN, description="1-64 of A-Z a-z 0-9 _ . - (not first: . _ -)")]
IfMatch = Annotated[str | None, Header(description='"v<version>-<digest>" from an ETag, or *')]
IfNoneMatch = Annotated[str | None, Header(description="* : create only, 412 if the list exists")]


class _TooLarge(Exception):
    def __init__(self, size: int) -> None:
        self.size = size


@contextmanager
def _store_errors(runtime: Runtime) -> Iterator[None]:
    """Translate store errors into HTTP answers."""
    try:
        yield
    except WordListNotFound as exc:
        raise ApiError(404, str(exc), param="name", code="wordlist_not_found") from None
    except PreconditionFailed as exc:
        headers = {"ETag": exc.etag} if exc.etag else {}
        raise ApiError(412, str(exc), param="If-Match", code="precondition_failed", headers=headers) from None
    except WriteConflict as exc:  # busy, not down: a 409 the client retries, outside the 5xx alert
        raise ApiError(409, str(exc), param="name", code="write_conflict", headers={"Retry-After": "1"}) from None
    except WriteOutcomeUnknown as exc:
        raise ApiError(503, str(exc), code="write_outcome_unknown", headers={"Retry-After": "1"}) from None
    except StoreUnavailable as exc:
        raise ApiError(503, f"word-list store unavailable ({exc}); the previous version keeps serving",
                       code="store_unavailable", headers={"Retry-After": "1"}) from None
    except _TooLarge as exc:
        limit = runtime.settings.max_list_terms
        raise ApiError(413, f"the list would hold {exc.size} terms; the limit is {limit} "
                       "(GUARDRAIL_MAX_LIST_TERMS)", param="terms", code="list_too_large") from None


def _precondition(if_match: str | None, if_none_match: str | None) -> Precondition | None:
    if if_none_match is not None:
        if if_none_match.strip() != "*":
            raise ApiError(400, "only If-None-Match: * is supported", param="If-None-Match", code="invalid_value")
        return Precondition(absent=True)
    if if_match is None:
        return None
    try:
        return Precondition.if_match(if_match)
    except ValueError as exc:
        raise ApiError(400, str(exc), param="If-Match", code="invalid_value") from None


def _allow_terms(name: str, allow: list[str]) -> tuple[str, ...]:
    """Allow-terms validated by the core's word-list parser (one ``!term`` line each)."""
    for index, text in enumerate(allow):
        if "\n" in text:  # would split into two lines, i.e. two allow-terms
            raise ApiError(400, "allow-term contains a line break", param=f"allow.{index}", code="invalid_term")
    try:
        return parse_wordlist("\n".join("!" + text for text in allow), name, source="<request>").allow
    except WordListError as exc:
        raise invalid_term(exc, "allow") from None


def _build(name: str, body: WordListIn, limit: int) -> WordList:
    size = len(body.terms) + len(body.allow)
    if size > limit:
        raise _TooLarge(size)
    items = to_terms(body.terms)
    try:
        wordlist = wordlist_from_terms(items, name=name)
    except WordListError as exc:
        raise invalid_term(exc, "terms") from None
    check_compiles(wordlist, items, "terms", MAX_REGEX_DFA_STATES)
    return WordList(name, wordlist.terms, _allow_terms(name, body.allow), body.obfuscation)


def _summary(runtime: Runtime, stored: StoredWordList) -> WordListSummary:
    return WordListSummary(
        name=stored.wordlist.name, version=stored.version, etag=stored.etag, updated_at=stored.updated_at,
        terms=len(stored.wordlist.terms), allow=len(stored.wordlist.allow),
        default=stored.wordlist.name in runtime.default_wordlists,
    )


@router.get("/wordlists", response_model=WordListIndex, summary="List the word lists")
def list_wordlists(access: Access, runtime: RuntimeDep) -> WordListIndex:
    with _store_errors(runtime):
        names = sorted(name for name in runtime.store.versions() if access.may_read(name))
        stored = [s for s in (runtime.store.get(n) for n in names) if s is not None]
    return WordListIndex(data=[_summary(runtime, s) for s in stored])


@router.get("/wordlists/{name}", response_model=WordListOut, summary="Read a word list (terms, version, ETag)",
            responses={404: {"description": "No such list."}})
def get_wordlist(name: ListName, access: Access, runtime: RuntimeDep, response: Response) -> WordListOut:
    access.check_read(name)
    with _store_errors(runtime):
        stored = runtime.store.get(name)
    if stored is None:
        raise ApiError(404, f"word list {name!r} does not exist", param="name", code="wordlist_not_found")
    response.headers["ETag"] = stored.etag
    return WordListOut.of(stored)


@router.get("/wordlists/{name}/versions", response_model=VersionIndex,
            summary="The kept versions of a word list, newest first (GUARDRAIL_WORDLIST_HISTORY)",
            responses={404: {"description": "No version of this name was ever written."}})
def list_versions(name: ListName, access: Access, runtime: RuntimeDep) -> VersionIndex:
    """The latest versions of the list (the current one included while the list exists; after a delete, the
    versions it had). Read one with ``GET .../versions/{version}``; write an older one back with ``PUT`` (its
    body is a valid ``PUT`` body) and ``If-Match`` the current ETag."""
    access.check_read(name)
    with _store_errors(runtime):
        kept = runtime.store.history(name)
        current = runtime.store.get(name)
    if not kept:
        raise ApiError(404, f"word list {name!r} does not exist", param="name", code="wordlist_not_found")
    return VersionIndex(data=[VersionOut.of(v, current.version if current else None) for v in kept])


@router.get("/wordlists/{name}/versions/{version}", response_model=WordListOut,
            summary="One kept version of a word list (terms, version, ETag)",
            responses={404: {"description": "No such list, or the version is not kept."}})
def get_wordlist_version(name: ListName, version: Annotated[int, Path(ge=1)], access: Access,
                         runtime: RuntimeDep) -> WordListOut:
    access.check_read(name)
    with _store_errors(runtime):
        stored = runtime.store.get_version(name, version)
    if stored is None:
        raise ApiError(404, f"word list {name!r} has no kept version {version} (GET .../versions lists them)",
                       param="version", code="version_not_found")
    return WordListOut.of(stored)


@router.put("/wordlists/{name}", response_model=WordListSummary, summary="Create or replace a word list",
            responses={201: {"description": "Created."}, 412: {"description": "Stale If-Match."},
                       413: {"description": "Too many terms."}, **_WRITE_ERRORS})
def put_wordlist(name: ListName, body: WordListIn, access: Access, runtime: RuntimeDep, response: Response,
                 if_match: IfMatch = None, if_none_match: IfNoneMatch = None) -> WordListSummary:
    access.check_write(name)
    token_id = access.token_id
    precondition = _precondition(if_match, if_none_match)
    created = False

    def compute(current: StoredWordList | None) -> Change:
        nonlocal created
        created = current is None  # the store may retry: the last call is the one committed
        return replacement(current, wordlist)

    with _store_errors(runtime):
        wordlist = _build(name, body, runtime.settings.max_list_terms)
        stored = runtime.store.write(name, compute, precondition, token_id)
    assert stored is not None
    runtime.catalog.apply_local(name, stored)
    response.status_code = 201 if created else 200
    response.headers["ETag"] = stored.etag
    return _summary(runtime, stored)


@router.patch("/wordlists/{name}", response_model=WordListSummary, summary="Add and remove terms",
              responses={404: {"description": "No such list."}, 412: {"description": "Stale If-Match."},
                         413: {"description": "Too many terms."}, **_WRITE_ERRORS})
def patch_wordlist(name: ListName, body: WordListPatch, access: Access, runtime: RuntimeDep,
                   response: Response, if_match: IfMatch = None) -> WordListSummary:
    access.check_write(name)
    token_id = access.token_id
    precondition = _precondition(if_match, None)
    limit = runtime.settings.max_list_terms
    items = to_terms(body.add)
    try:
        additions = wordlist_from_terms(items, name=name)
    except WordListError as exc:
        raise invalid_term(exc, "add") from None
    check_compiles(additions, items, "add", MAX_REGEX_DFA_STATES)
    add = additions.terms

    def compute(current: StoredWordList | None) -> Change:
        if current is None:
            raise WordListNotFound(name)
        change = patched(current, add, body.remove)
        assert change.wordlist is not None
        size = len(change.wordlist.terms) + len(change.wordlist.allow)
        if size > limit:
            raise _TooLarge(size)
        if any(term.regex for term in add):  # fine alone, but together with the list's regex terms?
            check_regex_terms(change.wordlist, MAX_REGEX_DFA_STATES)
        return change

    try:
        with _store_errors(runtime):
            stored = runtime.store.write(name, compute, precondition, token_id)
    except WordListError as exc:  # raised by compute: nothing was written
        raise invalid_term(WordListError(exc.reason, exc.source), "add") from None
    assert stored is not None
    runtime.catalog.apply_local(name, stored)
    response.headers["ETag"] = stored.etag
    return _summary(runtime, stored)


@router.delete("/wordlists/{name}", status_code=204, summary="Delete a word list",
               responses={404: {"description": "No such list."},
                          409: {"description": "In the default set, or the list kept changing (busy)."},
                          412: {"description": "Stale If-Match."}})
def delete_wordlist(name: ListName, access: Access, runtime: RuntimeDep, if_match: IfMatch = None) -> Response:
    access.check_write(name)
    token_id = access.token_id
    if name in runtime.default_wordlists:
        raise ApiError(409, f"word list {name!r} is in this server's default set (GUARDRAIL_WORDLISTS); "
                       "replace its terms instead", param="name", code="wordlist_in_default_set")
    precondition = _precondition(if_match, None)

    def compute(current: StoredWordList | None) -> Change:
        if current is None:
            raise WordListNotFound(name)
        return deletion(current)

    with _store_errors(runtime):
        runtime.store.write(name, compute, precondition, token_id)
    runtime.catalog.apply_local(name, None)
    return Response(status_code=204)


@router.get("/audit", response_model=AuditLog, summary="The latest changes, newest first")
def audit(_: TokenId, runtime: RuntimeDep,
          limit: Annotated[int, Query(ge=1, le=1000, description="Records to return.")] = 100) -> AuditLog:
    with _store_errors(runtime):
        records = runtime.store.audit(limit)
    return AuditLog(data=[AuditOut.of(r) for r in records])
