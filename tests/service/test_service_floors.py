"""Policy floors for anonymous callers and static keys, confidentiality of readiness, the admin port and the
admin token's guards (issue 31 items 3, 4 and 6), against ``guardrail serve`` with the real SmolLM2 and Redis.

One process for the module: shared client keys (``GUARDRAIL_API_KEYS``) under an anonymous policy with every
floor set (required list ``tlh``, obfuscation ``leet``, the evasion guard not below the server's, no request
terms), small anonymous rate limits, one generation at a time and no waiting room (``max_queue=0``), the admin
paths on a port of their own and three failed admin attempts a minute per address. Requests from a second
loopback address (``127.0.0.2``) stand for another client where an address counts.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import uuid

import httpx
import pytest
from helpers.service import MODEL, PROMPT, ROOT, clean_env, delete_namespace, free_port, start_service_process
from helpers.wait import wait_until

pytestmark = pytest.mark.slow

ADMIN = "floors-admin-token-0123456789abcdef-xyz"
KEYS = ("floors-key-a", "floors-key-b", "floors-key-c", "floors-key-d", "floors-key-e")
REQUESTS_PER_MINUTE = 4
TOKENS_PER_MINUTE = 400
TERM = "QI'yaH"  # a term of the bundled list tlh (wordlists/tlh.txt)


class Server:
    def __init__(self, process, admin_port: int) -> None:
        self.process = process
        self.base = process.base_url
        self.admin_base = f"http://127.0.0.1:{admin_port}"

    def call(self, method: str, path: str, token: str | None = None, admin_port: bool = False,
             source: str | None = None, timeout: float = 120, **kwargs) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        transport = httpx.HTTPTransport(local_address=source) if source else None
        with httpx.Client(transport=transport, timeout=timeout) as client:
            return client.request(method, (self.admin_base if admin_port else self.base) + path, headers=headers,
                                  **kwargs)


@pytest.fixture(scope="module")
def server(redis_url, tmp_path_factory):
    namespace = f"guardrail-test:{uuid.uuid4().hex}:"
    admin_port = free_port()
    process = start_service_process(tmp_path_factory.mktemp("floors"), {
        "GUARDRAIL_REDIS_URL": redis_url, "GUARDRAIL_REDIS_PREFIX": namespace, "GUARDRAIL_MODEL": MODEL,
        "GUARDRAIL_ADMIN_TOKEN": ADMIN, "GUARDRAIL_API_KEYS": ",".join(KEYS), "GUARDRAIL_WORDLISTS": "tlh",
        "GUARDRAIL_ANONYMOUS_REQUIRED_WORDLISTS": "tlh", "GUARDRAIL_ANONYMOUS_MIN_OBFUSCATION": "leet",
        "GUARDRAIL_EVASION_GUARD": "substring", "GUARDRAIL_ANONYMOUS_EVASION_GUARD_OFF": "false",
        "GUARDRAIL_ANONYMOUS_REQUEST_TERMS": "false",
        "GUARDRAIL_ANONYMOUS_REQUESTS_PER_MINUTE": str(REQUESTS_PER_MINUTE),
        "GUARDRAIL_ANONYMOUS_TOKENS_PER_MINUTE": str(TOKENS_PER_MINUTE),
        "GUARDRAIL_ADMIN_FAILURES_PER_MINUTE": "3", "GUARDRAIL_ADMIN_PORT": str(admin_port),
        "GUARDRAIL_MAX_CONCURRENT": "1", "GUARDRAIL_MAX_BATCH": "1", "GUARDRAIL_MAX_QUEUE": "0",
        "GUARDRAIL_DEFAULT_MAX_TOKENS": "4",
    }, cli=True)
    live = Server(process, admin_port)
    try:
        wait_until(lambda: live.call("GET", "/readyz").status_code == 200, 120, "ready",
                   alive=lambda: process.process.poll() is None)
        yield live
    finally:
        process.stop()
        delete_namespace(redis_url, namespace)


def chat(server: Server, key: str, **body) -> httpx.Response:
    return server.call("POST", "/v1/chat/completions", key,
                       json={"model": MODEL, "messages": PROMPT, "temperature": 0, **body})


# -- item 3: floors --------------------------------------------------------------------------------------------


def test_a_static_key_holder_cannot_drop_the_required_list_or_lower_the_floors(server):
    key = KEYS[0]
    check = server.call("POST", "/v1/check", key, json={"text": f"say {TERM} now", "wordlists": []})
    assert check.status_code == 200, check.text
    assert check.json()["flagged"] and [m["list"] for m in check.json()["matches"]] == ["tlh"]
    for field, value, param in (("obfuscation", "off", "obfuscation"), ("evasion_guard", "off", "evasion_guard"),
                                ("banned_terms", ["secret"], "banned_terms")):
        refused = chat(server, key, max_tokens=1, **{field: value})
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["param"] == param


def test_a_bearer_token_that_is_no_key_gets_401_when_static_keys_are_set(server):
    for token in (None, "sk-anything-else"):
        refused = server.call("GET", "/v1/models", token)
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"


def test_each_static_key_has_its_own_request_bucket(server):
    key, other = KEYS[1], KEYS[2]
    answers = [server.call("GET", "/v1/models", key).status_code for _ in range(REQUESTS_PER_MINUTE + 1)]
    assert answers == [200] * REQUESTS_PER_MINUTE + [429]
    assert server.call("GET", "/v1/models", other).status_code == 200


def test_a_request_the_full_queue_refuses_spends_no_tokens(server):
    holder, key = KEYS[2], KEYS[3]
    # The one worker is busy with a generation and there is no waiting room: the next one is refused. The
    # holder's text is held back whole (the evasion guard's floor), so the worker's own count says when it runs.
    held: dict[str, httpx.Response] = {}
    thread = threading.Thread(target=lambda: held.update(answer=server.call(
        "POST", "/v1/chat/completions", holder, timeout=600,  # a loaded machine decodes slowly
        json={"model": MODEL, "messages": PROMPT, "max_tokens": 120, "ignore_eos": True})))
    thread.start()
    wait_until(lambda: server.call("GET", "/admin/readiness", ADMIN, admin_port=True).json()["checks"]["worker"]
               ["running"] == 1, 60, "the holder's job on the worker")
    full = chat(server, key, max_tokens=300)
    assert full.status_code == 429, full.text
    assert full.json()["error"]["code"] == "queue_full"
    thread.join(timeout=600)
    assert held["answer"].status_code == 200, held["answer"].text
    wait_until(lambda: server.call("GET", "/admin/readiness", ADMIN, admin_port=True).json()["checks"]["worker"]
               ["running"] == 0, 60, "the worker free again")
    # Had the refused request been charged (prompt + 300), this one would pass the tokens per minute.
    answer = chat(server, key, max_tokens=300, stop=["."])
    assert answer.status_code == 200, answer.text
    over = chat(server, key, max_tokens=300)
    assert over.status_code == 429 and over.json()["error"]["code"] == "rate_limit_exceeded"


# -- item 4: readiness -----------------------------------------------------------------------------------------


def test_unauthenticated_readyz_says_ready_and_nothing_else_details_need_the_admin_token(server):
    plain = server.call("GET", "/readyz")
    assert plain.status_code == 200 and plain.json() == {"status": "ready"}
    for answer in (server.call("GET", "/readyz", ADMIN), server.call("GET", "/admin/readiness", ADMIN, admin_port=True)):
        body = answer.json()
        assert answer.status_code == 200 and body["status"] == "ready" and body["reason"] is None
        assert "tlh" in body["wordlists"] and body["checks"]["store"] == {"kind": "redis", "up": True}
    assert server.call("GET", "/readyz", KEYS[0]).json() == {"status": "ready"}  # a client key is no admin


# -- item 6: admin port, admin token, logs, watermark key ------------------------------------------------------


def test_admin_paths_and_metrics_answer_on_the_admin_port_only(server):
    for path in ("/metrics", "/admin/readiness", "/admin/wordlists"):
        assert server.call("GET", path, ADMIN).status_code == 404, path
        assert server.call("GET", path, ADMIN, admin_port=True).status_code == 200, path
    assert server.call("GET", "/v1/models", KEYS[0], admin_port=True).status_code == 404
    for probe in ("/healthz", "/readyz"):  # the kubelet may probe either port
        assert server.call("GET", probe, admin_port=True).status_code == 200


def test_failed_admin_attempts_are_throttled_per_address_with_retry_after(server):
    other = "127.0.0.2"
    for _ in range(3):
        wrong = server.call("GET", "/admin/wordlists", "x" * 40, admin_port=True, source=other)
        assert wrong.status_code == 403
    throttled = server.call("GET", "/admin/wordlists", ADMIN, admin_port=True, source=other)
    assert throttled.status_code == 429 and 1 <= int(throttled.headers["Retry-After"]) <= 60
    # Throttled, the address is no admin on /readyz either; another address is not throttled.
    assert server.call("GET", "/readyz", ADMIN, source=other).json() == {"status": "ready"}
    assert server.call("GET", "/admin/wordlists", ADMIN, admin_port=True).status_code == 200


def test_unknown_request_fields_are_logged_capped(server):
    # 200 long names (~40 KB; a request object holds at most 256 fields: service/schemas/open_object.py).
    unknown = {f"field_{i:05d}_{'x' * 200}": 0 for i in range(200)}
    answer = chat(server, KEYS[4], max_tokens=1, **unknown)
    assert answer.status_code == 200, answer.text
    wait_until(lambda: "ignored request fields" in server.process.log_tail(10**7), 10, "the log line")
    [line] = [line for line in server.process.log_path.read_text().splitlines() if "ignored request fields" in line]
    record = json.loads(line)
    assert record["ignored_field_count"] == 200
    assert 0 < len(record["ignored_fields"]) <= 20 and len(line) < 4096


def test_the_public_watermark_key_is_warned_about_at_start(server):
    assert "GUARDRAIL_WATERMARK_KEY is transformers' public default" in server.process.log_tail(10**7)


def test_a_short_admin_token_is_refused_at_start_without_echoing_it(tmp_path):
    token = "short-admin-secret-1234"
    result = subprocess.run([sys.executable, "-m", "service.cli.main", "serve", "--port", str(free_port())],
                            env=clean_env({"GUARDRAIL_ADMIN_TOKEN": token, "GUARDRAIL_DATA_DIR": str(tmp_path)}),
                            capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode != 0
    assert "at least 32 characters" in result.stderr and token not in result.stderr + result.stdout
