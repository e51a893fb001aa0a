"""A scripted upstream inference server: a fake, for the two things a real one (vLLM's server, llama.cpp's) cannot
show or cannot run here. It honours no ``logit_bias`` (so the gateway's fail-closed rule can be tested), and it
needs neither vLLM nor a model (so the service on the remote engine can be started on this machine).

As an ``httpx.MockTransport`` handler (:class:`ScriptedUpstream`), or over real HTTP on a loopback port
(:func:`serve_scripted`), speaking the part of vLLM's OpenAI server the gateway uses: ``/health``,
``/v1/models``, ``/tokenize`` and streamed ``/v1/completions`` with token ids.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx


class ScriptedUpstream:
    """Decodes ``script`` after any prompt that starts with ``base`` (the kept tokens continue it), whatever
    the request's ``logit_bias``; records every completion request."""

    def __init__(self, tokenizer, base: list[int], script: list[int], tokenize_offset: int = 0,
                 cached_tokens: int | None = None) -> None:
        self.tokenizer, self.base, self.script, self.offset = tokenizer, base, script, tokenize_offset
        self.cached_tokens = cached_tokens  # when set, each stream ends with a usage chunk reporting this many
        self.requests: list[dict] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/health":  # the engine's health probe
            return httpx.Response(200)
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "scripted", "owned_by": "vllm", "max_model_len": 2048}]})
        body = json.loads(request.content)
        if request.url.path == "/tokenize":
            ids = self.tokenizer.encode(body["prompt"], add_special_tokens=False)
            return httpx.Response(200, json={"tokens": [t + self.offset for t in ids]})
        self.requests.append(body)
        done = len(body["prompt"]) - len(self.base) if body["prompt"][:len(self.base)] == self.base else 0
        tokens = self.script[done:done + body["max_tokens"]]
        lines = [f"data: {json.dumps({'choices': [{'index': 0, 'token_ids': [t], 'finish_reason': None}]})}"
                 for t in tokens]
        lines.append(f"data: {json.dumps({'choices': [{'index': 0, 'token_ids': [], 'finish_reason': 'length'}]})}")
        if self.cached_tokens is not None:
            usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": len(tokens),
                     "prompt_tokens_details": {"cached_tokens": self.cached_tokens}}
            lines.append(f"data: {json.dumps({'choices': [], 'usage': usage})}")
        return httpx.Response(200, text="\n\n".join([*lines, "data: [DONE]", ""]),
                              headers={"content-type": "text/event-stream"})


@contextmanager
def serve_scripted(upstream: ScriptedUpstream) -> Iterator[str]:
    """``upstream`` over HTTP on a free loopback port, in a thread; yields its root URL."""

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            request = httpx.Request(self.command, f"http://upstream{self.path}", content=self.rfile.read(length))
            response = upstream(request)
            body = response.content
            self.send_response(response.status_code)
            self.send_header("content-type", response.headers.get("content-type", "application/json"))
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's signature
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="scripted-upstream", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
