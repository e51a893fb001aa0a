"""The console's client of the service's public API: every page reads and writes through it, with the signed-in
caller's own bearer token, so that the API's authentication, policies and limits decide what the console may do
(the console has no other way into the service: it imports no store, runtime or tenant directory).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp

from service.console.transport import ASGIStreamTransport

#: The base URL of the in-process calls (never resolved: the transport hands requests to the app).
BASE_URL = "http://guardrail.internal"


#: Bodies above this size are parsed off the event loop (:meth:`Api.get_json`).
LARGE_BODY_BYTES = 256 * 1024


def api_path(*segments: object) -> str:
    """An API path from its segments, each percent-encoded: a name that came from the browser stays one segment
    (``"a?b"`` cannot start a query, ``"a/b"`` cannot add a segment)."""
    return "/" + "/".join(quote(str(segment), safe="") for segment in segments)


@dataclass(frozen=True)
class ApiError:
    """An API answer that is not a success, as the console shows it: the status and the API's own error body."""

    status: int
    message: str
    param: str | None = None
    code: str | None = None

    @classmethod
    def of(cls, response: httpx.Response) -> ApiError:
        """Read OpenAI's error shape (``{"error": {"message", "param", "code"}}``), or the status alone."""
        try:
            error = response.json()["error"]
            return cls(response.status_code, str(error.get("message") or ""), error.get("param"), error.get("code"))
        except (ValueError, KeyError, TypeError):
            return cls(response.status_code, response.text[:500] or f"HTTP {response.status_code}")


class Api:
    """Calls into ``app`` as the caller holding ``token``.

    Args:
        app: the service's app (the console is mounted inside it).
        token: the caller's admin token or tenant key, sent as ``Authorization: Bearer``; None: no credentials.
        client: the browser's address, for the API's logs.
    """

    def __init__(self, app: ASGIApp, token: str | None, client: tuple[str, int] | None = None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.AsyncClient(transport=ASGIStreamTransport(app, client), base_url=BASE_URL,
                                       headers=headers, timeout=None)

    async def close(self) -> None:
        await self._http.aclose()

    async def call(self, method: str, path: str, *, json: Any = None, params: dict[str, Any] | None = None,
                   headers: dict[str, str] | None = None) -> httpx.Response:
        """One request; the whole answer read."""
        return await self._http.request(method, path, json=json, params=params, headers=headers)

    async def get_json(self, path: str, **params: Any) -> tuple[Any, ApiError | None]:
        """``GET path``: (the JSON body, None) on a 2xx answer, else (None, the error). A large body (a list of
        100,000 terms is megabytes) is parsed in a worker thread, off the event loop."""
        response = await self.call("GET", path, params=params or None)
        if not response.is_success:
            return None, ApiError.of(response)
        if len(response.content) > LARGE_BODY_BYTES:
            return await run_in_threadpool(response.json), None
        return response.json(), None

    async def send_streaming(self, method: str, path: str, *, json: Any = None) -> httpx.Response:
        """A request whose answer the caller reads as it comes and must close (``await response.aclose()``)."""
        return await self._http.send(self._http.build_request(method, path, json=json), stream=True)
