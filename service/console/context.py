"""What every console page has: the signed-in session, the API client as that caller, the submitted form (CSRF
checked), and rendering through the page templates (Jinja2, autoescaped)."""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote

import jinja2
from starlette.datastructures import ImmutableMultiDict
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

import guardrail
from service.console.api import Api, ApiError
from service.console.session import Session, same_origin, session_of, valid_csrf

TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"

_env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                          trim_blocks=True, lstrip_blocks=True)
_env.globals["version"] = guardrail.__version__


def _when(seconds: float | None) -> str:
    """Unix seconds as UTC time (``2026-11-27 01:50:57 UTC``)."""
    if seconds is None:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))


_env.filters["when"] = _when


def _asset_version() -> str:
    """A digest of the static files: their URLs change with them (``?v=``), so browsers may cache them."""
    digest = hashlib.sha256()
    for path in sorted(STATIC.iterdir()):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


_env.globals["asset_version"] = _asset_version()


@dataclass
class Page:
    """One request to a console page.

    Attributes:
        request: the browser's request.
        session: who is signed in.
        api: the public API, as that caller.
        form: the submitted form of a ``POST`` (its CSRF token checked), else empty.
    """

    request: Request
    session: Session
    api: Api
    form: ImmutableMultiDict

    def render(self, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        return render(self.request, template, status, session=self.session, **context)


def render(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
    """The page ``template`` with ``context`` (plus the path, for the navigation), never cached by the browser."""
    html = _env.get_template(template).render(path=request.url.path, **context)
    return HTMLResponse(html, status_code=status, headers={"Cache-Control": "no-store"})


async def read_form(request: Request) -> ImmutableMultiDict:
    """An ``application/x-www-form-urlencoded`` body (what the console's forms send), whole: the service's body
    limit (``GUARDRAIL_MAX_BODY_BYTES``, a 413 before the console reads it) bounds it."""
    body = await request.body()
    return ImmutableMultiDict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))


def app_of(request: Request) -> Any:
    """The service's app the console is mounted in (its API is called through it)."""
    return request.app.state.service_app


def api_for(request: Request, token: str | None) -> Api:
    client = request.client
    return Api(app_of(request), token, (client.host, client.port) if client else None)


def forbidden(request: Request, message: str) -> HTMLResponse:
    return render(request, "error.html", 403, session=session_of(request), title="Refused", message=message)


Handler = Callable[[Page], Awaitable[Response]]


def signed_in(*, admin: bool = False) -> Callable[[Handler], Callable[[Request], Awaitable[Response]]]:
    """A page for signed-in callers: without a session, a redirect to the sign-in page (back here after); a
    ``POST`` needs the session's CSRF token and an ``Origin`` of this site (else 403, nothing is done). ``admin``:
    a page for the admin token only (the API would refuse a tenant key anyway; the console says so at once)."""

    def wrap(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        @functools.wraps(handler)
        async def endpoint(request: Request) -> Response:
            session = session_of(request)
            if session is None:
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                return RedirectResponse(f"/console/sign-in?next={quote(target, safe='')}", status_code=303)
            form: ImmutableMultiDict = ImmutableMultiDict()
            if request.method == "POST":
                form = await read_form(request)
                given = form.get("csrf") or request.headers.get("x-csrf-token")
                if not same_origin(request) or not valid_csrf(session.csrf, given):
                    return forbidden(request, "This form is stale or was not sent from the console (CSRF check). "
                                              "Reload the page and try again.")
            if admin and not session.admin:
                return forbidden(request, "This page needs the admin token: a tenant key cannot manage tenants or "
                                          "read the audit log.")
            api = api_for(request, session.token)
            try:
                return await handler(Page(request, session, api, form))
            finally:
                await api.close()

        return endpoint

    return wrap


def error_text(error: ApiError | None) -> str | None:
    """How a page shows an API error: its message, and the field it names."""
    if error is None:
        return None
    where = f" ({error.param})" if error.param else ""
    return f"{error.message}{where}" if error.message else f"HTTP {error.status}{where}"
