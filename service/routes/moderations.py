"""``POST /v1/moderations``: OpenAI's moderations endpoint as a view of ``/v1/check``. Each word list is a
category (its name the key, ``request`` for the request's own terms): flagged when one of its terms occurs in
the input, under the same matching contract and obfuscation level the decoder enforces (docs/service.md,
"Moderations"). Only the lists' names are returned, never the terms that matched."""

from __future__ import annotations

import uuid

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool

from service.auth import require_client
from service.deps import RuntimeDep
from service.errors import documented_errors
from service.routes.check import Scanner
from service.schemas.moderations import DEFAULT_MODEL, ModerationRequest, ModerationResponse, ModerationResult

router = APIRouter(prefix="/v1", tags=["check"], dependencies=[Depends(require_client)])


@router.post("/moderations", response_model=ModerationResponse, summary="OpenAI moderations over the word lists",
             responses=documented_errors(e401="Missing or unknown API key.", e403="Not allowed by the key's policy.",
                                         e404="Unknown word list.", e429="The API key's rate limit.",
                                         e413="Body or request terms beyond the server's limits."))
async def moderate(body: ModerationRequest, runtime: RuntimeDep, request: Request) -> ModerationResponse:
    """One result per input: ``flagged`` and, by list, ``categories`` (bool) and ``category_scores`` (1.0 or 0.0).
    The request's terms compile in the bounded compile pool; the scans (megabytes take a while) run in the thread
    pool, never on the event loop."""
    scanner = await Scanner.for_request(runtime, request, body.wordlists, body.request_terms(),
                                        "bad_words" if body.bad_words else "banned_terms", body.obfuscation)
    names = scanner.list_names

    def scan_all() -> list[ModerationResult]:
        results = []
        for text in body.inputs():
            hit = {match.list_name for match in scanner.scan(text)}
            results.append(ModerationResult(
                flagged=bool(hit), categories={name: name in hit for name in names},
                category_scores={name: 1.0 if name in hit else 0.0 for name in names},
                category_applied_input_types={name: ["text"] for name in names}))
        return results

    results = await run_in_threadpool(scan_all)
    return ModerationResponse(id=f"modr-{uuid.uuid4().hex}", model=body.model or DEFAULT_MODEL, results=results)
