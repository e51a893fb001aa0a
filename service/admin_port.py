"""The admin port (``GUARDRAIL_ADMIN_PORT``): ``/admin``, ``/metrics`` and ``/console`` served on a port of their
own, so that a NetworkPolicy (or a firewall) can admit that port from operators' namespaces only while any
client reaches ``/v1`` (docs/deploy.md, "Network policy").

One process, one app, two listening sockets (``guardrail serve`` binds both): this middleware sorts the requests
by the local port they arrived on. On the admin port only the admin paths and the probes (``/healthz``,
``/readyz``) answer; on the main port the admin paths answer 404 as for a path that does not exist. Unset
(``make serve``), the main port serves everything.
"""

from __future__ import annotations

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

#: Path prefixes served on the admin port only (a tenant's ``/admin/wordlists`` included).
ADMIN_PREFIXES = ("/admin", "/metrics", "/console")
#: Paths both ports answer (the kubelet probes whichever port it is given).
PROBES = ("/healthz", "/readyz")
#: The ASGI scope extension of a call made inside the process (the console calling the API for its page: the page
#: itself came through the admin port), which no socket sets: such calls are let through on any path.
IN_PROCESS = "guardrail.in_process"


def is_admin_path(path: str) -> bool:
    """Whether ``path`` belongs on the admin port."""
    return any(path == prefix or path.startswith(prefix + "/") for prefix in ADMIN_PREFIXES)


class AdminPortMiddleware:
    """Answers 404 to an admin path on any port but ``admin_port``, and to any other path (probes aside) on it.

    Args:
        app: the ASGI app.
        admin_port: the TCP port the admin paths are served on (the socket's local port, ``scope["server"]``).
    """

    def __init__(self, app: ASGIApp, admin_port: int) -> None:
        self.app = app
        self.admin_port = admin_port

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and IN_PROCESS not in (scope.get("extensions") or {}):
            server = scope.get("server")
            on_admin_port = server is not None and server[1] == self.admin_port
            path = scope["path"]
            allowed = path in PROBES or is_admin_path(path) == on_admin_port
            if not allowed:
                where = "the main port" if on_admin_port else f"the admin port ({self.admin_port})"
                response = JSONResponse({"error": {"message": f"Not found here: {path} is served on {where}.",
                                                   "type": "invalid_request_error", "param": None,
                                                   "code": "not_found"}}, status_code=404)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
