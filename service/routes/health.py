"""Liveness, readiness and the Prometheus scrape endpoint (docs/service.md, "Health, readiness and drain")."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from service.auth import is_admin, require_admin
from service.deps import RuntimeDep
from service.runtime import Runtime
from service.worker import Load

router = APIRouter(tags=["health"])

#: The readiness states that take a replica out of the load balancer (503), in order of precedence.
NOT_READY = ("draining", "unavailable", "overloaded")


@router.get("/healthz", summary="Liveness: the event loop answers and no worker thread is stuck",
            responses={503: {"description": "A worker thread is stuck or an engine thread ended: restart me"}})
async def healthz(request: Request) -> JSONResponse:
    """200 while the process can make progress; 503 when a worker thread has been busy without a decoder
    event for more than ``GUARDRAIL_WORKER_STALL_TIMEOUT_S`` (default: the request time limit plus 30 s)
    while no other thread had one (:meth:`service.heartbeat.Heartbeats.stalled`), or an engine or worker
    thread ended. ``async`` on purpose: it answers from the event loop, never waits for a thread-pool slot,
    and reads only counters (no lock held for long, no I/O)."""
    runtime = getattr(request.app.state, "runtime", None)
    if runtime is None:  # not started yet (uvicorn accepts connections only after the lifespan; tests)
        return JSONResponse({"status": "ok"})
    limit_s = runtime.settings.worker_stall_limit_s
    stalled = runtime.worker.stalled(limit_s)
    problem = runtime.engine_problem()
    if not stalled and problem is None:
        return JSONResponse({"status": "ok"})
    body: dict[str, Any] = {"status": "stuck"}
    if stalled:
        body["stalled"] = [{"thread": s.thread, "seconds_without_progress": round(s.seconds, 1)} for s in stalled]
        body["stall_limit_s"] = limit_s
    if problem is not None:
        body["engine"] = problem
    return JSONResponse(body, status_code=503)


def readiness(*, draining: bool, drain_seconds: float, engine_problem: str | None, load: Load,
              queue_fraction: float, store: dict[str, Any], engine: dict[str, Any] | None = None,
              ) -> tuple[str, dict[str, Any]]:
    """The readiness status and its checks. Status, by precedence: ``draining`` (SIGTERM received),
    ``unavailable`` (the engine cannot generate), ``overloaded`` (the waiting generations fill
    ``queue_fraction`` of the queue, see :meth:`Load.saturated`), ``degraded`` (the store does not
    answer, the replica serves from its in-memory lists; or a remote upstream does not answer, shared by
    every replica, so taking this one out would not help), ``ready``. The first three are answered 503.
    ``engine``: the engine's check (``kind``, ``up``, ``detail``)."""
    overloaded = load.saturated(queue_fraction)
    checks: dict[str, Any] = {
        "drain": {"draining": draining, **({"seconds": round(drain_seconds, 1)} if draining else {})},
        "model": {"loaded": True, "engine": engine_problem or "up"},
        "store": store,
        **({"engine": engine} if engine is not None else {}),
        "worker": {"running": load.running, "waiting": load.waiting, "threads": load.threads,
                   "max_queue": load.max_queue, "overloaded": overloaded},
    }
    if draining:
        status = "draining"
    elif engine_problem is not None:
        status = "unavailable"
    elif overloaded:
        status = "overloaded"
    elif not store["up"] or (engine is not None and not engine["up"]):
        status = "degraded"
    else:
        status = "ready"
    return status, checks


def reason(status: str, checks: dict[str, Any]) -> str | None:
    """The reason code of a readiness status (None when ready): ``draining``, ``engine_unavailable``,
    ``queue_saturated``, ``store_unavailable`` or ``upstream_unavailable``. A code only: no list name, version or
    error text, so that the unauthenticated ``/readyz`` shows nothing of the lists or the infrastructure."""
    if status == "draining":
        return "draining"
    if status == "unavailable":
        return "engine_unavailable"
    if status == "overloaded":
        return "queue_saturated"
    if status == "degraded":
        return "store_unavailable" if not checks["store"]["up"] else "upstream_unavailable"
    return None


@router.get("/readyz", summary="Readiness: 200 ready or degraded, 503 draining, unavailable or overloaded",
            responses={503: {"description": "Draining, engine unavailable or queue over the threshold (body says)"}})
def readyz(request: Request, runtime: RuntimeDep) -> JSONResponse:
    """Ready (200) when the model is loaded, the engine runs, the queue is below
    ``GUARDRAIL_READY_QUEUE_FRACTION`` and the process is not draining; 503 otherwise. The body is
    ``{"status": ..., "reason": ...}``: ``status`` (``ready``, ``degraded``, ``draining``, ``unavailable``,
    ``overloaded``) and a reason code (:func:`reason`; absent when ready). With the admin token as bearer
    token it is the detailed body of ``GET /admin/readiness`` (``checks`` and the lists' versions).
    """
    status, body = _readiness(request, runtime)
    if not is_admin(request):
        body = {"status": status, **({"reason": body["reason"]} if body["reason"] else {})}
    return JSONResponse(body, status_code=503 if status in NOT_READY else 200)


@router.get("/admin/readiness", tags=["admin"], summary="Readiness with its checks (admin token)",
            responses={503: {"description": "Draining, engine unavailable or queue over the threshold (body says)"}})
def admin_readiness(request: Request, runtime: RuntimeDep, _: Annotated[str, Depends(require_admin)]) -> JSONResponse:
    """What ``/readyz`` answers, with ``checks`` saying why and every list's version (admin token only: list
    names, store and upstream error text stay off the unauthenticated probe).

    Ready (200) when the model is loaded, the engine runs, the queue is below
    ``GUARDRAIL_READY_QUEUE_FRACTION`` and the process is not draining; 503 otherwise, with
    ``status`` (``draining``, ``unavailable``, ``overloaded``) and ``checks`` saying why.

    A replica whose Redis is down still generates from its in-memory copy of the lists, so it stays in
    service (200) and reports ``"status": "degraded"``; ``checks.store`` says why. Answering 503 would
    take every replica out of the load balancer at once during a Redis outage. The
    ``guardrail_redis_up`` metric and its alert carry the outage to operators. ``checks.store.data_lost``
    appears once the store noticed that Redis lost its data (``guardrail_store_resets_total``, alert
    ``GuardrailStoreDataLost``). ``checks.engine``: the engine's last known state; with a remote upstream that
    does not answer, generation requests get 503 with ``Retry-After`` and the status is ``degraded``.
    """
    status, body = _readiness(request, runtime)
    return JSONResponse(body, status_code=503 if status in NOT_READY else 200)


def _readiness(request: Request, runtime: Runtime) -> tuple[str, dict[str, Any]]:
    catalog = runtime.catalog
    store: dict[str, Any] = {"kind": runtime.store.kind, "up": catalog.healthy}
    resets = getattr(runtime.store, "resets", 0)
    if resets:  # the store lost its data while this replica ran (Redis without persistence)
        store["data_lost"] = {"count": resets, "last_at": runtime.store.last_reset_at}
    if catalog.last_error:
        store["error"] = catalog.last_error
    health = runtime.engine.health()
    engine = {"kind": runtime.engine.name, "up": health.ok, "detail": health.detail}
    drain = request.app.state.drain
    status, checks = readiness(draining=drain.draining, drain_seconds=drain.seconds(),
                               engine_problem=runtime.engine_problem(), load=runtime.worker.load(),
                               queue_fraction=runtime.settings.ready_queue_fraction, store=store, engine=engine)
    checks["model"]["id"] = runtime.model_id
    body = {
        "status": status,
        "reason": reason(status, checks),
        "checks": checks,
        "wordlists": {name: runtime.catalog.get(name).version for name in runtime.catalog.names()},
    }
    return status, body


@router.get("/metrics", summary="Prometheus metrics (text exposition format)",
            response_class=Response, responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}})
def metrics(request: Request) -> Response:
    return Response(generate_latest(request.app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
