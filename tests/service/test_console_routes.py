"""The console adds no route beyond its pages and static assets, and reaches the service only through its public
API: it imports no store, runtime, tenant directory or route module. No model is loaded (the app is built, not
started)."""

from __future__ import annotations

import ast

from helpers.paths import ROOT
from starlette.routing import Mount, Route

from service.app import create_app
from service.console import PREFIX
from service.settings import Settings

#: What the console's code may import from the service besides itself: two pure functions of a token's text
#: (its id for display, whether it is written as a tenant key).
ALLOWED_SERVICE_IMPORTS = {"service.auth", "service.tenants.keys"}
#: Every page of the console (and the data of two of them: the live view's stream, the charts' counters).
PAGES = {
    "/": {"GET", "HEAD"}, "/sign-in": {"GET", "HEAD", "POST"}, "/sign-out": {"POST"},
    "/lists": {"GET", "HEAD", "POST"}, "/lists/{name}": {"GET", "HEAD", "POST"},
    "/lists/{name}/versions": {"GET", "HEAD", "POST"}, "/lists/{name}/diff": {"GET", "HEAD"},
    "/tenants": {"GET", "HEAD", "POST"}, "/tenants/{name}": {"GET", "HEAD", "POST"}, "/audit": {"GET", "HEAD"},
    "/check": {"GET", "HEAD", "POST"}, "/live": {"GET", "HEAD"}, "/live/stream": {"POST"},
    "/ops": {"GET", "HEAD"}, "/ops/counters": {"GET", "HEAD"},
}


def routes_of(app) -> set[str]:
    return {f"{sorted(getattr(r, 'methods', None) or ['*'])} {getattr(r, 'path', '')}" for r in app.router.routes
            if not isinstance(r, Mount)}


def test_the_console_is_one_mount_beside_the_api_and_adds_no_api_route(tmp_path):
    with_console = create_app(Settings(admin_token="a" * 40, data_dir=tmp_path))
    without = create_app(Settings(admin_token="a" * 40, data_dir=tmp_path, console=False))
    assert routes_of(with_console) == routes_of(without)  # the API is the same, route for route
    mounts = [r for r in with_console.router.routes if isinstance(r, Mount)]
    assert [m.path for m in mounts] == [PREFIX] and not any(isinstance(r, Mount) for r in without.router.routes)
    (console,) = mounts
    pages = {r.path: set(r.methods) for r in console.routes if isinstance(r, Route)}
    assert pages == PAGES
    assert [(m.path, type(m.app).__name__) for m in console.routes if isinstance(m, Mount)] == [
        ("/static", "StaticFiles")]


def test_the_console_imports_nothing_of_the_service_but_two_pure_functions_of_a_token():
    imported = set()
    for path in (ROOT / "service" / "console").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
    service = {name for name in imported if name.startswith("service.") and not name.startswith("service.console")}
    assert service == ALLOWED_SERVICE_IMPORTS
    assert "service" not in imported  # nor the package itself (``from service import ...``)


def test_with_an_admin_port_the_console_pages_and_their_api_calls_pass_its_gate(tmp_path):
    """The console's in-process calls carry the scope extension the admin port's gate lets through: without it,
    the gate answers 404 to /admin from a page (the call's "server" is no socket's port)."""
    import asyncio

    from service.admin_port import IN_PROCESS
    from service.console.transport import IN_PROCESS as CONSOLE_IN_PROCESS

    assert CONSOLE_IN_PROCESS == IN_PROCESS
    app = create_app(Settings(admin_token="a" * 40, data_dir=tmp_path, admin_port=9101))

    async def status(path: str, port: int, extensions: dict | None = None) -> int:
        answer: dict = {}

        async def receive():
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message):
            if message["type"] == "http.response.start":
                answer["status"] = message["status"]

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
                 "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
                 "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", port), "headers": [],
                 **({"extensions": extensions} if extensions is not None else {})}
        await app(scope, receive, send)
        return answer["status"]

    async def scenario() -> None:
        assert await status("/console/sign-in", 8000) == 404
        assert await status("/console/sign-in", 9101) == 200
        assert await status("/admin/tenants", 8000) == 404
        # Let through on any port (no token here: the admin API's own 401 answers, not the gate's 404).
        assert await status("/admin/tenants", 8000, {IN_PROCESS: {}}) == 401

    asyncio.run(scenario())
