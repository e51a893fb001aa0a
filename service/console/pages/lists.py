"""Word lists: browse and search, create, add and remove terms (``If-Match`` the version the page showed), the
kept versions, the difference between two, and rolling back to one (``PUT`` of its terms, ``If-Match`` the current
version). A stale ``If-Match`` is shown as a conflict with what changed meanwhile; a term the API refuses is shown
with the API's message next to the field."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from starlette.responses import RedirectResponse, Response

from service.console.api import ApiError, api_path
from service.console.context import Page, error_text, signed_in
from service.console.forms import lines, term_item

MATCH_MODES = ("word", "prefix", "substring")
OBFUSCATION_LEVELS = ("off", "homoglyphs", "leet", "spaced", "masked", "masked+markup")
#: Terms shown per page of a list.
TERMS_PER_PAGE = 100


def _int(value: str | None, default: int) -> int:
    return int(value) if value and value.isdigit() else default


def _term_key(term: dict[str, Any]) -> tuple[str, str, bool, str | None]:
    return term["text"], term["match"], term["case_sensitive"], term.get("obfuscation")


def _version_of(etag: str | None) -> int | None:
    """The version an ETag of this service names: ``"v3"`` or ``"v3-<content digest>"`` -> 3."""
    found = re.match(r'^(?:W/)?"?v(\d+)\b', (etag or "").strip())
    return int(found.group(1)) if found else None


def term_diff(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """What changed from list body ``old`` to ``new`` (as ``GET /admin/wordlists/{name}`` gives them): terms and
    allow-terms added and removed (a term's options are part of it), and the list's obfuscation level."""
    before = {_term_key(t): t for t in old["terms"]}
    after = {_term_key(t): t for t in new["terms"]}
    return {
        "added": [after[k] for k in after if k not in before],
        "removed": [before[k] for k in before if k not in after],
        "kept": sum(1 for k in after if k in before),
        "allow_added": [a for a in new["allow"] if a not in set(old["allow"])],
        "allow_removed": [a for a in old["allow"] if a not in set(new["allow"])],
        "obfuscation": (old.get("obfuscation"), new.get("obfuscation")),
    }


@signed_in()
async def index(page: Page) -> Response:
    """``GET /admin/wordlists`` (what the caller may read), filtered by name; ``POST``: create a list."""
    errors: dict[str, str] = {}
    notice = None
    if page.request.method == "POST":
        name = (page.form.get("name") or "").strip()
        terms = lines(page.form.get("terms"))
        answer = await page.api.call("PUT", api_path("admin", "wordlists", name), json={"terms": terms},
                                     headers={"If-None-Match": "*"})
        if answer.is_success:
            return RedirectResponse(f"/console/lists/{name}", status_code=303)
        error = ApiError.of(answer)
        if answer.status_code == 412:
            errors["name"] = f"A list named {name!r} exists already."
        else:
            errors["terms" if (error.param or "").startswith("terms") else "name"] = error_text(error) or ""
    data, failure = await page.api.get_json("/admin/wordlists")
    query = (page.request.query_params.get("q") or "").strip()
    lists = [w for w in (data or {}).get("data", []) if query.casefold() in w["name"].casefold()]
    return page.render("lists.html", 400 if errors else 200, title="Word lists", lists=lists, query=query,
                       failure=error_text(failure), errors=errors, form=page.form, notice=notice)


async def _audit(page: Page, name: str) -> list[dict[str, Any]]:
    """The list's latest audit records (the admin's: a tenant key would get 403 from the API, so none is asked)."""
    if not page.session.admin:
        return []
    records, _ = await page.api.get_json("/admin/audit", limit=200)
    return [r for r in (records or {}).get("data", []) if r["list"] == name][:20]


async def _show(page: Page, name: str, *, status: int = 200, **extra: Any) -> Response:
    (data, failure), audit = await asyncio.gather(page.api.get_json(api_path("admin", "wordlists", name)),
                                                  _audit(page, name))
    if failure is not None:
        return page.render("error.html", failure.status, title=f"Word list {name}", message=error_text(failure))
    query = (page.request.query_params.get("q") or "").strip()
    terms = [t for t in data["terms"] if query.casefold() in t["text"].casefold()]
    pages = max(1, -(-len(terms) // TERMS_PER_PAGE))
    number = min(max(_int(page.request.query_params.get("page"), 1), 1), pages)
    first = (number - 1) * TERMS_PER_PAGE
    return page.render("list.html", status, title=f"Word list {name}", wordlist=data, terms=terms, query=query,
                       shown=terms[first:first + TERMS_PER_PAGE], first=first, pages=pages, page_number=number,
                       audit=audit, match_modes=MATCH_MODES, levels=OBFUSCATION_LEVELS,
                       **{"errors": {}, "conflict": None, "notice": None, "form": {}, **extra})


@signed_in()
async def wordlist(page: Page) -> Response:
    """One list: its terms (searched by ``q``), the add and remove forms, its recent audit records."""
    name = page.request.path_params["name"]
    if page.request.method == "GET":
        return await _show(page, name)
    action = page.form.get("action")
    etag = page.form.get("etag") or None
    if action == "add":
        item, problem = term_item(page.form)
        if problem is not None:
            return await _show(page, name, status=400, errors={"add": problem}, form=page.form)
        body: dict[str, Any] = {"add": [item]}
        done = f"Added {item['text']!r}."
    elif action == "remove":
        body = {"remove": [page.form.get("term") or ""]}
        done = f"Removed {page.form.get('term')!r}."
    else:
        return await _show(page, name, status=400, errors={"add": "Unknown action."})
    answer = await page.api.call("PATCH", api_path("admin", "wordlists", name), json=body,
                                 headers={"If-Match": etag} if etag else None)
    if answer.is_success:
        return await _show(page, name, notice=f"{done} The list is now at version "
                                              f"{answer.json()['version']}.")
    error = ApiError.of(answer)
    if answer.status_code == 412:
        return await _conflict(page, name, etag, body, error)
    field = "add" if action == "add" else "remove"
    return await _show(page, name, status=answer.status_code, errors={field: error_text(error)}, form=page.form)


async def _conflict(page: Page, name: str, etag: str | None, body: dict[str, Any], error: ApiError) -> Response:
    """The list changed after the page was shown: nothing was written. Show what changed meanwhile (the version
    the page showed against the current one) and offer to send the same change again, on the current version."""
    seen = _version_of(etag)
    current, _ = await page.api.get_json(api_path("admin", "wordlists", name))
    changes = None
    if seen is not None and current is not None:
        old, _ = await page.api.get_json(api_path("admin", "wordlists", name, "versions", seen))
        if old is not None:
            changes = term_diff(old, current)
    # The same form again, with the current version's ETag: "apply my change on the current version".
    resubmit = {k: v for k, v in page.form.multi_items() if k not in ("csrf", "etag")}
    conflict = {"seen": seen, "current": current["version"] if current else None, "message": error.message,
                "changes": changes, "change": body, "resubmit": resubmit,
                "etag": current["etag"] if current else None}
    return await _show(page, name, status=409, conflict=conflict)


@signed_in()
async def versions(page: Page) -> Response:
    """The kept versions; ``POST``: roll back to one (its terms written as a new version, ``If-Match`` the
    current one)."""
    name = page.request.path_params["name"]
    notice = error = None
    status = 200
    if page.request.method == "POST":
        version = page.form.get("version")
        old, failure = await page.api.get_json(api_path("admin", "wordlists", name, "versions", version))
        if failure is None:
            body = {"terms": old["terms"], "allow": old["allow"], "obfuscation": old["obfuscation"]}
            answer = await page.api.call("PUT", api_path("admin", "wordlists", name), json=body,
                                         headers={"If-Match": page.form.get("etag") or "*"})
            if answer.is_success:
                notice = f"Rolled back: version {answer.json()['version']} holds the terms of version {version}."
            else:
                failure = ApiError.of(answer)
                if answer.status_code == 412:
                    error = (f"Conflict: the list changed since this page was shown ({failure.message}). Nothing was "
                             "written; check the versions below and roll back again if you still want to.")
        if failure is not None and error is None:
            error = error_text(failure)
        status = 409 if error and error.startswith("Conflict") else (400 if error else 200)
    (data, failure), (current, _) = await asyncio.gather(
        page.api.get_json(api_path("admin", "wordlists", name, "versions")),
        page.api.get_json(api_path("admin", "wordlists", name)))  # its ETag: a roll back is If-Match it
    if failure is not None:
        return page.render("error.html", failure.status, title=f"Versions of {name}", message=error_text(failure))
    return page.render("versions.html", status, title=f"Versions of {name}", name=name, versions=data["data"],
                       current=current, notice=notice, error=error)


@signed_in()
async def diff(page: Page) -> Response:
    """What changed between two kept versions (``from`` and ``to``)."""
    name = page.request.path_params["name"]
    params = page.request.query_params
    chosen = (params.get("from") or "", params.get("to") or "")
    bodies = []
    for version in chosen:
        body, failure = await page.api.get_json(api_path("admin", "wordlists", name, "versions", version))
        if failure is not None:
            return page.render("error.html", failure.status, title=f"Versions of {name}", message=error_text(failure))
        bodies.append(body)
    return page.render("diff.html", title=f"{name}: version {chosen[0]} to {chosen[1]}", name=name,
                       old=bodies[0], new=bodies[1], changes=term_diff(bodies[0], bodies[1]))
