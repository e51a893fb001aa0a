"""HTTP to the upstream inference server (vLLM's OpenAI server, llama.cpp's server): httpx, one pooled
keep-alive client.

Retries: on connect errors only (httpx's transport retries a connection that could not be opened; a request
that reached the server is never sent twice, so a generation is never run twice). Timeouts: connect and
pool waits short, reads as long as one token may take.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

__all__ = ["UpstreamClient", "UpstreamError"]


class UpstreamError(RuntimeError):
    """The upstream answered with an error status or a body that is not what its API promises.

    Attributes:
        status: the HTTP status (0: no response, or a malformed one).
    """

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class UpstreamClient:
    """A connection pool to one upstream.

    Args:
        base_url: the server's root (``http://vllm:8000``; ``/v1/...`` is appended).
        max_connections: connections at most (the engine's capacity plus the health probe).
        connect_timeout_s: opening a connection, seconds (also the wait for a free pooled connection).
        read_timeout_s: the longest gap between two bytes of a response, seconds (a prefill of a long prompt
            comes before the first token).
        retries: connection attempts repeated after a connect error.
        transport: another httpx transport (tests: a scripted upstream where vLLM cannot act the fault).
    """

    def __init__(self, base_url: str, *, max_connections: int = 32, connect_timeout_s: float = 2.0,
                 read_timeout_s: float = 60.0, retries: int = 2, transport: httpx.BaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._client = httpx.Client(
            base_url=self.base_url,
            timeout=httpx.Timeout(connect=connect_timeout_s, read=read_timeout_s, write=read_timeout_s,
                                  pool=connect_timeout_s),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
            transport=transport or httpx.HTTPTransport(retries=retries),
        )

    def close(self) -> None:
        self._client.close()

    def get_json(self, path: str, timeout_s: float | None = None) -> Any:
        """``GET path``'s JSON body.

        Raises:
            httpx.TransportError: the upstream cannot be reached.
            UpstreamError: an error status or a body that is not JSON.
        """
        return self._json(self._client.get(path, timeout=httpx.USE_CLIENT_DEFAULT if timeout_s is None else timeout_s))

    def post_json(self, path: str, body: dict[str, Any]) -> Any:
        """``POST path`` with a JSON body; its JSON answer (errors as :meth:`get_json`)."""
        return self._json(self._client.post(path, json=body))

    def ok(self, path: str, timeout_s: float) -> bool:
        """Whether ``GET path`` answers 2xx within ``timeout_s`` (the health probe; never raises)."""
        try:
            return self._client.get(path, timeout=timeout_s).is_success
        except httpx.HTTPError:
            return False

    @contextmanager
    def stream_completion(self, body: dict[str, Any]) -> Iterator[Iterator[dict[str, Any]]]:
        """``POST /v1/completions`` with ``stream: true``: the SSE ``data:`` chunks, parsed, up to ``[DONE]``
        (:meth:`stream_sse`).

        Leaving the ``with`` block before the end closes the connection, which makes vLLM abort the request
        (it frees the request's KV blocks; full blocks stay in its prefix cache).
        """
        with self.stream_sse("/v1/completions", body) as chunks:
            yield chunks

    @contextmanager
    def stream_sse(self, path: str, body: dict[str, Any], *,
                   until_done: bool = True) -> Iterator[Iterator[dict[str, Any]]]:
        """``POST path`` with ``stream: true``: the SSE ``data:`` chunks, parsed.

        Args:
            until_done: the stream ends with ``data: [DONE]`` (OpenAI's APIs); a stream that ends without it
                broke. ``False``: it ends when the server closes it (llama.cpp's ``/completion``: its last
                chunk says ``stop: true``, which the caller checks).

        Leaving the ``with`` block before the end closes the connection; vLLM and llama.cpp's server then
        abort the request.

        Raises:
            httpx.TransportError: the upstream cannot be reached, or the connection broke midway.
            UpstreamError: an error status (its body's message), a malformed chunk, or an ``error`` chunk.
        """
        with self._client.stream("POST", path, json={**body, "stream": True}) as response:
            if not response.is_success:
                response.read()
                raise UpstreamError(f"upstream {path} answered {response.status_code}: "
                                    f"{_message(response)}", response.status_code)
            yield _chunks(response, until_done)

    def _json(self, response: httpx.Response) -> Any:
        if not response.is_success:
            raise UpstreamError(f"upstream {response.request.url.path} answered {response.status_code}: "
                                f"{_message(response)}", response.status_code)
        try:
            return response.json()
        except ValueError as exc:
            raise UpstreamError(f"upstream {response.request.url.path} answered a body that is not JSON") from exc


def _chunks(response: httpx.Response, until_done: bool) -> Iterator[dict[str, Any]]:
    for line in response.iter_lines():
        if not line.startswith("data:"):
            continue  # blank separators, comments, other SSE fields
        data = line[len("data:"):].strip()
        if data == "[DONE]":
            return
        try:
            chunk = json.loads(data)
        except ValueError as exc:
            raise UpstreamError("upstream sent a stream chunk that is not JSON") from exc
        if "error" in chunk and "choices" not in chunk:
            raise UpstreamError(f"upstream stream error: {_short(chunk['error'])}")
        yield chunk
    if until_done:
        raise httpx.RemoteProtocolError("the upstream stream ended without [DONE]")


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:200]
    error = body.get("error", body) if isinstance(body, dict) else body
    return _short(error)


def _short(error: Any) -> str:
    text = error.get("message", error) if isinstance(error, dict) else error
    return str(text)[:300]
