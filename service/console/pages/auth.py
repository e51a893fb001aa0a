"""Signing in and out. A credential is accepted when the API accepts it for ``GET /admin/wordlists`` (the admin
token, or a live tenant key): the console asks the API, it checks nothing itself."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from service.console.api import ApiError
from service.console.context import api_for, error_text, forbidden, read_form, render
from service.console.session import (
    SIGN_IN_COOKIE,
    end_session,
    keep_sign_in_token,
    same_origin,
    session_of,
    sign_in_token,
    start_session,
    valid_csrf,
)


def _next(value: str | None) -> str:
    """Where to go after signing in: a console page, never another site (``//host``) or path."""
    if value and value.startswith("/console/") and not value.startswith("//") and "\\" not in value:
        return value
    return "/console/lists"


async def sign_in(request: Request) -> Response:
    if request.method == "GET":
        return _form(request, request.query_params.get("next"), None,
                     "Signed out." if request.query_params.get("signed_out") else None)
    form = await read_form(request)
    if not same_origin(request) or not valid_csrf(request.cookies.get(SIGN_IN_COOKIE, ""), form.get("csrf")):
        return forbidden(request, "This sign-in form is stale or was not sent from the console. Reload it.")
    token = (form.get("token") or "").strip()
    if not token:
        return _form(request, form.get("next"), "Enter a token.")
    api = api_for(request, token)
    try:
        answer = await api.call("GET", "/admin/wordlists")
    finally:
        await api.close()
    if not answer.is_success:
        return _form(request, form.get("next"), error_text(ApiError.of(answer)), status=answer.status_code)
    response = RedirectResponse(_next(form.get("next")), status_code=303)
    start_session(response, request, token)
    return response


def _form(request: Request, next_page: str | None, error: str | None, notice: str | None = None,
          status: int = 200) -> Response:
    csrf = sign_in_token(request)
    page = render(request, "sign_in.html", status, session=None, next=_next(next_page), error=error, notice=notice,
                  csrf=csrf)
    keep_sign_in_token(page, request, csrf)
    return page


async def sign_out(request: Request) -> Response:
    session = session_of(request)
    form = await read_form(request)
    if session is not None and (not same_origin(request) or not valid_csrf(session.csrf, form.get("csrf"))):
        return forbidden(request, "This form is stale or was not sent from the console. Reload the page.")
    response = RedirectResponse("/console/sign-in?signed_out=1", status_code=303)
    end_session(response, request)
    return response


async def home(request: Request) -> Response:
    return RedirectResponse("/console/lists" if session_of(request) else "/console/sign-in", status_code=303)
