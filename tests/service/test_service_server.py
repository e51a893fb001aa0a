"""Starting the service: ``guardrail serve`` on a fresh machine, and the shared in-thread server
(tests/helpers/service_fixtures.py) ready with Redis."""

from __future__ import annotations

import pytest
from helpers.service import metric, start_service_process

# -- tests of starting the service ---------------------------------------------------------------------


@pytest.mark.slow
def test_guardrail_serve_runs_on_a_fresh_machine_with_the_embedded_store(tmp_path):
    """The README's first command: no Redis, no token; bundled lists seeded, admin API off with a hint."""
    server = start_service_process(tmp_path, {}, cli=True)
    try:
        ready = server.get("/readyz")
        assert ready.status_code == 200, ready.text
        assert ready.json() == {"status": "ready"}  # no admin token: no details (docs/service.md)
        check = server.post("/v1/check", json={"text": "what the fuck"})
        assert check.json()["flagged"] is True
        assert check.json()["wordlists"] == [{"name": "en", "version": 1}]
        admin = server.admin("GET", "/admin/wordlists")
        assert admin.status_code == 403
        assert "GUARDRAIL_ADMIN_TOKEN" in admin.json()["error"]["message"]
        assert "guardrail_redis_up" not in server.metrics()
        assert '"message": "model loaded"' in server.log_tail(100_000)
    finally:
        server.stop()
    assert (tmp_path / "data" / "wordlists" / "index.json").is_file()


@pytest.mark.slow
def test_the_shared_service_is_ready_with_redis(service):
    ready = service.admin("GET", "/readyz")
    assert ready.status_code == 200, ready.text
    assert ready.json()["checks"]["store"] == {"kind": "redis", "up": True}
    assert metric(service.metrics(), "guardrail_redis_up") == 1
