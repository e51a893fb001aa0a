"""ASGI middleware around every HTTP request: request id, in-flight gauge, request counters and
durations by route, the access log, and the request body size limit.

Pure ASGI (not ``BaseHTTPMiddleware``) so that streamed responses pass through untouched and the
duration covers the last byte.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.errors import error_body
from service.metrics import ServiceMetrics
from service.tenants.labels import NONE

log = logging.getLogger("guardrail.service.access")

_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
# Scrapes and probes are frequent and uninteresting: logged at DEBUG only.
_QUIET_ENDPOINTS = frozenset({"/metrics", "/healthz", "/readyz"})


def _endpoint(scope: Scope) -> str:
    """The route template (``/admin/wordlists/{name}``), never the raw path (label cardinality)."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else "unmatched"


class ObservabilityMiddleware:
    """Counts, times and logs every HTTP request; adds ``X-Request-ID`` (kept from the client when valid).

    Args:
        app: the wrapped ASGI app.
        metrics: ``guardrail_requests_total``, ``guardrail_request_duration_seconds`` (both by ``tenant`` too:
            :mod:`service.tenants.labels`), ``guardrail_inflight_requests`` (not /metrics and the probes).
    """

    def __init__(self, app: ASGIApp, metrics: ServiceMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        given = dict(scope.get("headers") or []).get(b"x-request-id", b"").decode("latin-1")
        request_id = given if _REQUEST_ID.match(given) else uuid.uuid4().hex[:16]
        state = scope.setdefault("state", {})
        state["request_id"], state["started_at"] = request_id, started  # started_at: TTFT's origin
        status = 500  # what an exception escaping the app becomes

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", []), (b"x-request-id", request_id.encode())]
            await send(message)

        # Scrapes and probes are not load: counted, they would make the gauge read 1 on an idle replica.
        inflight = scope.get("path") not in _QUIET_ENDPOINTS
        if inflight:
            self.metrics.inflight_requests.inc()
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            if inflight:
                self.metrics.inflight_requests.dec()
            endpoint = _endpoint(scope)
            seconds = time.perf_counter() - started
            # Set by the /v1 routes' client dependency (service.auth.require_client); never the key itself.
            label = state.get("tenant_label", NONE)
            caller = state.get("caller")
            self.metrics.requests.labels(endpoint, str(status), label).inc()
            self.metrics.request_duration.labels(endpoint, label).observe(seconds)
            log.log(
                logging.DEBUG if endpoint in _QUIET_ENDPOINTS else logging.INFO,
                "request",
                extra={"request_id": request_id, "method": scope.get("method"), "endpoint": endpoint,
                       "status": status, "seconds": round(seconds, 4),
                       "tenant": caller.tenant if caller is not None else None},
            )


class BodyLimitMiddleware:
    """Answer 413 (OpenAI error shape) to a request body larger than ``max_bytes``.

    With a ``Content-Length`` the answer comes before the body is read. Without one (chunked transfer
    encoding) the body is read here, at most ``max_bytes`` of it, and handed to the app only when it
    ended within the limit; so no route ever parses more than ``max_bytes``, however the body is sent.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def _reject(self, send: Send) -> None:
        body = json.dumps(error_body(f"request body larger than {self.max_bytes} bytes",
                                     status=413, code="request_too_large")).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        if length is not None:
            if length.isdigit() and int(length) > self.max_bytes:
                await self._reject(send)
                return
            await self.app(scope, receive, send)  # the server reads no more than the length says
            return
        if scope.get("method") in ("GET", "HEAD", "OPTIONS", "DELETE") and b"transfer-encoding" not in headers:
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._reject(send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()  # after the body: wait for the disconnect, as the server would

        await self.app(scope, replay, send)
