"""Starting the service: ``guardrail serve`` on a fresh machine, and the shared in-thread server
(tests/helpers/service_fixtures.py) ready with Redis."""

from __future__ import annotations

import pytest
from helpers.service import STARTUP_TIMEOUT_S, metric, start_service_process
from helpers.wait import wait_until

from guardrail.matching.memo_warmup import warm_memo
from guardrail.wordlists.wordlist import with_obfuscation

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


@pytest.mark.slow
def test_the_start_up_warm_up_warmed_the_default_artefacts_memo(service):
    """The warm-up thread ran the bundled corpus through the default set's artefact: its pairs are memoised
    (a second pass computes none) and the corpus hit nothing."""
    runtime = service.runtime
    wait_until(lambda: runtime.memo_warmup is not None, STARTUP_TIMEOUT_S, "the memo warm-up")
    stats = runtime.memo_warmup
    assert stats.tokens > 0 and stats.pairs > 0 and stats.hits == 0
    lists = [s.wordlist for s in runtime.catalog.resolve(runtime.default_wordlists)]
    artefact, _ = runtime.artefacts.get(runtime.vocab, with_obfuscation(lists, runtime.settings.obfuscation))
    again = warm_memo(artefact)
    assert (again.tokens, again.pairs) == (stats.tokens, 0)
