"""The service shared by the whole session, as a pytest plugin (``pytest_plugins`` in tests/conftest.py).

The ``service`` fixture is one server for the whole session, uvicorn in a thread of the test process on a
free loopback port, so that tests can look at its runtime (and inject faults into it). Tests that use it
(or ``openai_client``) are marked ``slow`` by tests/conftest.py: it loads SmolLM2.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest

from helpers.service import (
    ADMIN_TOKEN,
    CLIENT_KEY,
    MODEL,
    STARTUP_TIMEOUT_S,
    LiveServer,
    delete_namespace,
    free_port,
)
from helpers.wait import wait_until


@pytest.fixture(scope="session")
def service_namespace(redis_url) -> Iterator[str]:
    """The shared server's Redis key prefix (deleted at the end of the session)."""
    namespace = f"guardrail-test:{uuid.uuid4().hex}:"
    yield namespace
    delete_namespace(redis_url, namespace)


@pytest.fixture(scope="session")
def service(redis_url, service_namespace, tmp_path_factory) -> Iterator[LiveServer]:
    """The service in a thread of this process: Redis store, admin token and a client key set, one
    generation at a time with room for one more in the queue (so that a third is refused)."""
    import uvicorn

    from service.app import create_app
    from service.settings import Settings

    settings = Settings(
        model=MODEL,
        redis_url=redis_url,
        redis_prefix=service_namespace,
        admin_token=ADMIN_TOKEN,
        api_keys=[CLIENT_KEY],
        data_dir=tmp_path_factory.mktemp("service-data"),
        max_concurrent=1,
        max_batch=1,
        max_queue=1,
        version_poll_interval_s=0.5,
        default_max_tokens=24,
    )
    app = create_app(settings)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None,
                                           access_log=False, lifespan="on"))
    thread = threading.Thread(target=server.run, name="test-service", daemon=True)
    thread.start()
    wait_until(lambda: server.started, STARTUP_TIMEOUT_S, "in-thread service", alive=thread.is_alive)
    live = LiveServer(f"http://127.0.0.1:{port}", app)
    yield live
    server.should_exit = True
    thread.join(timeout=30)


@pytest.fixture(scope="session")
def openai_client(service):
    from openai import OpenAI

    return OpenAI(base_url=f"{service.base_url}/v1", api_key=CLIENT_KEY, max_retries=0, timeout=120)
