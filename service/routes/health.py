"""Liveness, readiness and the Prometheus scrape endpoint."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from service.deps import RuntimeDep

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="Liveness: the process answers")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", summary="Readiness: 200 ready or degraded (body says which and why)")
def readyz(runtime: RuntimeDep) -> JSONResponse:
    """Ready when the model is loaded and the word-list store answers.

    A replica whose Redis is down still generates from its in-memory copy of the lists, so it stays in
    service (200) and reports ``"status": "degraded"``; ``checks.store`` says why. Answering 503 would
    take every replica out of the load balancer at once during a Redis outage. The
    ``guardrail_redis_up`` metric and its alert carry the outage to operators. ``checks.store.data_lost``
    appears once the store noticed that Redis lost its data (``guardrail_store_resets_total``, alert
    ``GuardrailStoreDataLost``). ``checks.engine``: the engine's last known state; with a remote upstream that
    does not answer, generation requests get 503 with ``Retry-After`` and the status is ``degraded``.
    """
    catalog = runtime.catalog
    store = {"kind": runtime.store.kind, "up": catalog.healthy}
    resets = getattr(runtime.store, "resets", 0)
    if resets:  # the store lost its data while this replica ran (Redis without persistence)
        store["data_lost"] = {"count": resets, "last_at": runtime.store.last_reset_at}
    if catalog.last_error:
        store["error"] = catalog.last_error
    engine = runtime.engine.health()
    body = {
        "status": "ready" if catalog.healthy and engine.ok else "degraded",
        "checks": {
            "model": {"id": runtime.model_id, "loaded": True},
            "engine": {"kind": runtime.engine.name, "up": engine.ok, "detail": engine.detail},
            "store": store,
            "worker": {"waiting": runtime.worker.waiting},
        },
        "wordlists": {name: runtime.catalog.get(name).version for name in runtime.catalog.names()},
    }
    return JSONResponse(body)


@router.get("/metrics", summary="Prometheus metrics (text exposition format)",
            response_class=Response, responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}})
def metrics(request: Request) -> Response:
    return Response(generate_latest(request.app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
