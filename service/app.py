"""The FastAPI application factory: ``uvicorn --factory service.app:create_app`` or ``guardrail serve``.

``create_app`` only wires routes, middleware and error handlers; the lifespan loads the model, opens the
word-list store and starts the worker (:class:`~service.runtime.Runtime`), off the event loop, and
stops them on shutdown.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool

import guardrail
from guardrail.params import DEFAULT_HASHING_KEY
from service.admin_port import AdminPortMiddleware
from service.admin_throttle import AdminFailures
from service.drain import Drain
from service.errors import install_error_handlers, openapi_with_400
from service.logs import configure_logging
from service.metrics import ServiceMetrics
from service.observability import BodyLimitMiddleware, ObservabilityMiddleware
from service.routes import (
    admin,
    chat,
    check,
    completions,
    health,
    messages,
    models,
    moderations,
    responses,
    tenants,
    watermark,
)
from service.settings import Settings
from service.tenants.access import Tenants

log = logging.getLogger("guardrail.service")


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    from service.runtime import Runtime  # imports torch/transformers: only when the app starts

    settings: Settings = app.state.settings
    configure_logging(settings.log_level)  # on start, not in create_app: building an app has no side effects
    runtime = await run_in_threadpool(Runtime, settings, app.state.metrics)
    await run_in_threadpool(runtime.start)
    app.state.runtime = runtime
    app.state.tenants = Tenants(settings, runtime.store, lambda: runtime.catalog.healthy)
    if settings.watermark_key == DEFAULT_HASHING_KEY:
        log.warning("GUARDRAIL_WATERMARK_KEY is transformers' public default: anyone can detect, and forge, this "
                    "server's watermark; set a secret integer (the Helm chart generates one at install)")
    try:
        yield
    finally:
        await run_in_threadpool(runtime.close)


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the app. ``settings`` default to the ``GUARDRAIL_*`` environment.

    Raises:
        pydantic.ValidationError: an environment variable holds an invalid value (names it).
    """
    settings = settings if settings is not None else Settings()
    app = FastAPI(
        title="guardrail",
        version=guardrail.__version__,
        summary="OpenAI-compatible generation that never emits a banned term.",
        lifespan=_lifespan,
    )
    app.state.settings = settings
    app.state.metrics = ServiceMetrics(with_redis=settings.redis_url is not None, model=settings.model)
    app.state.admin_failures = AdminFailures(settings.admin_failures_per_minute)
    app.state.drain = Drain(settings.drain_timeout_s, app.state.metrics)  # run by guardrail serve on SIGTERM
    install_error_handlers(app)
    default_openapi = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            app.openapi_schema = openapi_with_400(default_openapi())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    for router in (chat.router, completions.router, responses.router, models.router, check.router, watermark.router,
                   admin.router, tenants.router, health.router):
        app.include_router(router)
    # Other APIs' shapes on the same generation path and lists (Anthropic's Messages, OpenAI's moderations).
    app.include_router(messages.router)
    app.include_router(moderations.router)
    if settings.console:  # pages over the API above, with the caller's credentials (docs/console.md)
        from service.console import PREFIX, build_console

        app.mount(PREFIX, build_console(app))
    if settings.admin_port is not None:  # innermost: the access log and metrics see its 404s
        app.add_middleware(AdminPortMiddleware, admin_port=settings.admin_port)
    # Added last = outermost: the body limit answers before anything reads the body.
    app.add_middleware(ObservabilityMiddleware, metrics=app.state.metrics)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    return app
