"""The live view: a prompt sent to ``POST /v1/chat/completions`` as the signed-in caller, streamed with the guard's
events (``stream_options.include_guard_events``), and drawn by ``static/live.js`` from that stream alone: the
kept text, each rollback where it happened (the retracted fragment, the term and its list when the caller may read
the list), the retries, the finish reason and ``filtered_by``.

``POST /console/live/stream`` hands the API's answer to the page byte for byte (status, type and body: the SSE
chunks, or the API's error); closing it early closes the API's stream, which cancels the generation.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from service.console.context import Page, api_for, error_text, read_form, signed_in
from service.console.forms import lines
from service.console.session import same_origin, session_of, valid_csrf

#: The answer's length limit the form offers first, tokens.
DEFAULT_MAX_TOKENS = 64


@signed_in()
async def live(page: Page) -> Response:
    (index, _), (models, failure) = await asyncio.gather(page.api.get_json("/admin/wordlists"),
                                                         page.api.get_json("/v1/models"))
    available = (index or {}).get("data", [])
    return page.render("live.html", title="Live view", available=available,
                       chosen=[w["name"] for w in available if w["default"]],
                       model=(models or {"data": [{"id": ""}]})["data"][0]["id"], failure=error_text(failure),
                       max_tokens=DEFAULT_MAX_TOKENS)


def chat_body(form: Any) -> dict[str, Any]:
    """The chat request a live-view form describes: one user turn, streamed with usage and the guard's events.
    Values are passed as given; the API validates them (a 400 names the field)."""
    body: dict[str, Any] = {
        "model": form.get("model", ""), "messages": [{"role": "user", "content": form.get("prompt", "")}],
        "stream": True, "stream_options": {"include_usage": True, "include_guard_events": True},
        "wordlists": form.getlist("wordlists"),
    }
    terms = lines(form.get("terms"))
    if terms:
        body["banned_terms"] = terms
    for field, kind in (("max_tokens", int), ("temperature", float), ("seed", int)):
        value = (form.get(field) or "").strip()
        if value:
            try:
                body[field] = kind(value)
            except ValueError:
                body[field] = value  # the API names the field
    return body


async def stream(request: Request) -> Response:
    """Start the generation and hand its stream to the page (the page's own ``fetch``, CSRF token in the form)."""
    session = session_of(request)
    if session is None:
        return JSONResponse({"error": {"message": "Sign in first.", "code": "signed_out"}}, status_code=401)
    form = await read_form(request)
    if not same_origin(request) or not valid_csrf(session.csrf, form.get("csrf")):
        return JSONResponse({"error": {"message": "Stale form (CSRF check): reload the page.", "code": "csrf"}},
                            status_code=403)
    api = api_for(request, session.token)
    try:
        answer = await api.send_streaming("POST", "/v1/chat/completions", json=chat_body(form))
    except BaseException:
        await api.close()
        raise

    async def relay() -> AsyncIterator[bytes]:
        # Closed however the page's response ends (done, or the browser went away: the generator is finalised),
        # which closes the API's stream and so cancels the generation.
        try:
            async for chunk in answer.aiter_raw():
                yield chunk
        finally:
            await answer.aclose()
            await api.close()

    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    return StreamingResponse(relay(), status_code=answer.status_code, headers=headers,
                             media_type=answer.headers.get("content-type", "text/event-stream"))
