"""Who is signed in to the console, CSRF tokens, and the security headers of every console answer.

The credential (the admin token or a tenant key) is kept in a cookie the page's scripts cannot read (``HttpOnly``),
that the browser sends only to ``/console`` and never on a request started by another site (``SameSite=Strict``),
``Secure`` when the console is reached over HTTPS. It is nowhere else: not in a page, not on the server (the
console keeps no state). Every form carries a CSRF token, ``HMAC-SHA256(credential, nonce)``: the nonce is drawn
at sign-in and kept in the cookie beside the credential, so the token changes at each sign-in and can be checked
by any replica without shared state; a page without the credential cannot compute it. Before sign-in, the
sign-in form uses a random token kept in a second cookie (double submit). A ``POST`` whose ``Origin`` is another
site is refused as well.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.auth import token_id
from service.tenants.keys import is_tenant_key

#: The cookie holding ``<nonce>.<credential>``.
COOKIE = "guardrail_console"
#: The cookie holding the sign-in form's CSRF token (before a credential is known).
SIGN_IN_COOKIE = "guardrail_console_signin"
#: How long a sign-in lasts, seconds (the cookie's ``Max-Age``).
MAX_AGE_S = 8 * 3600
PATH = "/console"

#: Scripts, styles and images from the console itself only; no inline script or style, no frames, forms posted
#: only to the console. ``connect-src 'self'``: the live view and the charts fetch from the console.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-content-type-options": "nosniff",
    # Not no-referrer: under it a browser sends "Origin: null" with the console's own forms.
    "referrer-policy": "same-origin",
    "x-frame-options": "DENY",
    "cross-origin-opener-policy": "same-origin",
}


@dataclass(frozen=True)
class Session:
    """A signed-in browser.

    Attributes:
        token: the credential (secret: never rendered).
        nonce: drawn at sign-in; the CSRF token is derived from it.
    """

    token: str
    nonce: str

    @property
    def admin(self) -> bool:
        """Signed in with the admin token (else a tenant key)."""
        return not is_tenant_key(self.token)

    @property
    def key_id(self) -> str:
        """12 hex digits of the credential's SHA-256: how the audit log and the tenant list name it."""
        return token_id(self.token)

    @property
    def csrf(self) -> str:
        """The CSRF token every form of this session carries."""
        return hmac.new(self.token.encode(), f"console-csrf:{self.nonce}".encode(), hashlib.sha256).hexdigest()


def session_of(request: Request) -> Session | None:
    """The session the request's cookie holds, or None."""
    value = request.cookies.get(COOKIE, "")
    nonce, dot, token = value.partition(".")
    if not dot or len(nonce) != 32 or not token:
        return None
    return Session(token, nonce)


def _secure(request: Request) -> bool:
    return request.url.scheme == "https"


def start_session(response: Response, request: Request, token: str) -> Session:
    """Set the session cookie for ``token`` (and drop the sign-in cookie)."""
    session = Session(token, secrets.token_hex(16))
    response.set_cookie(COOKIE, f"{session.nonce}.{token}", max_age=MAX_AGE_S, path=PATH, secure=_secure(request),
                        httponly=True, samesite="strict")
    response.delete_cookie(SIGN_IN_COOKIE, path=PATH, secure=_secure(request), httponly=True, samesite="strict")
    return session


def end_session(response: Response, request: Request) -> None:
    response.delete_cookie(COOKIE, path=PATH, secure=_secure(request), httponly=True, samesite="strict")


def sign_in_token(request: Request) -> str:
    """The sign-in form's CSRF token: the one in the browser's sign-in cookie, or a new one (set it on the answer
    with :func:`keep_sign_in_token`)."""
    token = request.cookies.get(SIGN_IN_COOKIE, "")
    return token if len(token) == 32 else secrets.token_hex(16)


def keep_sign_in_token(response: Response, request: Request, token: str) -> None:
    response.set_cookie(SIGN_IN_COOKIE, token, max_age=3600, path=PATH, secure=_secure(request), httponly=True,
                        samesite="strict")


def same_origin(request: Request) -> bool:
    """False when the request says it comes from another site: ``Sec-Fetch-Site`` other than ``same-origin`` or
    ``none`` (typed by the user), or an ``Origin`` naming another host than the one it was sent to (``Host``, or
    ``X-Forwarded-Host`` behind a proxy that rewrites it), or ``null``. No ``Origin``: not a cross-site request from
    a current browser (they send it on every ``POST``)."""
    if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    if origin is None:
        return True
    hosts = {request.headers.get("host"), request.headers.get("x-forwarded-host")} - {None}
    return origin != "null" and origin.split("://", 1)[-1] in hosts


def valid_csrf(expected: str, given: str | None) -> bool:
    return bool(given) and hmac.compare_digest(expected.encode(), (given or "").encode())


class SecurityHeaders:
    """Adds :data:`SECURITY_HEADERS` to every answer of the console (pages, assets, the live stream)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.decode().lower() not in SECURITY_HEADERS]
                headers += [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)
