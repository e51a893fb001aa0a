"""An httpx transport that sends requests into an ASGI app in this process and streams the answer back.

The console calls the service's public API through it: each call is an HTTP request that goes through the whole
app (its middleware, body limit, authentication and routes) with the signed-in caller's bearer token, as it would
from any client, without a socket. httpx's own ``ASGITransport`` collects the whole body before it returns, which
a Server-Sent Events stream (the live view) cannot wait for; this one hands each ``http.response.body`` message on
as it is sent, and tells the app the client went away when the response is closed early (the generation is then
cancelled, as for a client that disconnects).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
from starlette.types import ASGIApp, Message

#: The scope extension that marks a call made inside the process: ``service.admin_port.IN_PROCESS`` (the same
#: text; the console imports nothing of the service's routing, tests/service/test_console_routes.py).
IN_PROCESS = "guardrail.in_process"

_DONE = object()


class _Body(httpx.AsyncByteStream):
    """The body of one answer, read from the messages the app sends."""

    def __init__(self, messages: asyncio.Queue[Any], task: asyncio.Task[None], gone: asyncio.Event) -> None:
        self._messages = messages
        self._task = task
        self._gone = gone

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            message = await self._messages.get()
            if message is _DONE:
                return
            if isinstance(message, BaseException):
                raise httpx.RemoteProtocolError(f"the service failed while answering ({type(message).__name__})")
            if message["type"] == "http.response.body":
                if message.get("body"):
                    yield message["body"]
                if not message.get("more_body", False):
                    return

    async def aclose(self) -> None:
        self._gone.set()  # the app's next receive() says http.disconnect
        if not self._task.done():
            try:
                await asyncio.wait_for(asyncio.shield(self._task), timeout=5.0)
            except TimeoutError:
                self._task.cancel()


class ASGIStreamTransport(httpx.AsyncBaseTransport):
    """Send each request into ``app`` (an ASGI 3 application).

    Args:
        app: the service's app (its outermost middleware).
        client: the ASGI ``client`` (host, port) the app sees: the browser's, so that its logs name the real client.
        server: the ASGI ``server`` (host, port).
    """

    def __init__(self, app: ASGIApp, client: tuple[str, int] | None = None,
                 server: tuple[str, int | None] | None = None) -> None:
        self.app = app
        self.client = client
        self.server = server

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": request.method,
            "scheme": request.url.scheme, "path": request.url.path, "raw_path": request.url.raw_path.split(b"?")[0],
            "query_string": request.url.query, "root_path": "", "client": self.client,
            "server": self.server or (request.url.host, request.url.port),
            "headers": [(name.lower(), value) for name, value in request.headers.raw],
            # The console's own calls passed the admin port's gate with the page's request (service/admin_port.py).
            "extensions": {IN_PROCESS: {}},
        }
        messages: asyncio.Queue[Any] = asyncio.Queue()
        gone = asyncio.Event()
        body_sent = False

        async def receive() -> Message:
            nonlocal body_sent
            if not body_sent:
                body_sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            await messages.put(message)

        async def run() -> None:
            try:
                await self.app(scope, receive, send)
            except Exception as exc:  # noqa: BLE001 - handed to the reader, which raises it as a transport error
                await messages.put(exc)
            finally:
                await messages.put(_DONE)

        task = asyncio.ensure_future(run())
        start = await messages.get()
        if start is _DONE or isinstance(start, BaseException) or start["type"] != "http.response.start":
            gone.set()
            raise httpx.RemoteProtocolError("the service answered without a response")
        return httpx.Response(start["status"], headers=start.get("headers", []), stream=_Body(messages, task, gone),
                              request=request)
