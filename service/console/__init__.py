"""The admin console at ``/console`` (docs/console.md): word lists, tenants, a check playground, a live view of the
guard at work and operations at a glance, for the admin token or a tenant key.

A client of the public API, served by the service: every page reads and writes through the API with the signed-in
caller's own credential (:mod:`service.console.api`, an HTTP request into the app), so the API's authentication,
tenant policies, limits and confidentiality rules decide what the console shows and does; it imports no store,
runtime or tenant directory and adds no route of its own beyond its pages, their forms and data, and its static
assets, all under ``/console``. Server-rendered pages (Jinja2) with two small scripts (the live view, the charts),
no asset from another host, no build step. ``GUARDRAIL_CONSOLE=false`` leaves it out.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from service.console.context import STATIC
from service.console.pages import audit, auth, check, lists, live, ops, tenants
from service.console.session import SecurityHeaders

#: Where the console is mounted in the service.
PREFIX = "/console"


@dataclass(frozen=True)
class _MountedRoute:
    path: str


class RouteLabel:
    """Names a console request's route with its full template (``/console/lists/{name}``) for the service's request
    metrics and access log (``service.observability`` reads ``scope["route"].path``), which would otherwise see the
    path inside the mount (``/lists/{name}``)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.app(scope, receive, send)
        finally:
            path = getattr(scope.get("route"), "path", None)
            if isinstance(path, str) and not path.startswith(PREFIX):
                scope["route"] = _MountedRoute(PREFIX + path)


def build_console(service_app: ASGIApp) -> Starlette:
    """The console as an ASGI app to mount at :data:`PREFIX` in ``service_app``, whose API it calls."""
    routes = [
        Route("/", auth.home),
        Route("/sign-in", auth.sign_in, methods=["GET", "POST"]),
        Route("/sign-out", auth.sign_out, methods=["POST"]),
        Route("/lists", lists.index, methods=["GET", "POST"]),
        Route("/lists/{name}", lists.wordlist, methods=["GET", "POST"]),
        Route("/lists/{name}/versions", lists.versions, methods=["GET", "POST"]),
        Route("/lists/{name}/diff", lists.diff),
        Route("/tenants", tenants.index, methods=["GET", "POST"]),
        Route("/tenants/{name}", tenants.tenant, methods=["GET", "POST"]),
        Route("/audit", audit.audit),
        Route("/check", check.playground, methods=["GET", "POST"]),
        Route("/live", live.live),
        Route("/live/stream", live.stream, methods=["POST"]),
        Route("/ops", ops.ops),
        Route("/ops/counters", ops.counters_json),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    console = Starlette(routes=routes, middleware=[Middleware(RouteLabel), Middleware(SecurityHeaders)])
    console.state.service_app = service_app
    return console
