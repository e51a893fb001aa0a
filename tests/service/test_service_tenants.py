"""Tenants through the official ``openai`` client: their own default lists and limits, rate limits (429 with
``Retry-After``), revocation that holds at once on two replicas sharing Redis, the anonymous policy switched
off, the admin API and the CLI, the tenant as a metrics label and a log field, and keys never in a log.

Replica A is the session's in-thread service (``service``: Redis store, a shared client key); replica B a
``uvicorn`` process on the same Redis prefix with anonymous requests disabled and a metrics label cap of 1,
started once for this module (each start loads SmolLM2).
"""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import openai
import pytest
from helpers.service import ADMIN_TOKEN, CLIENT_KEY, MODEL, PROMPT, ROOT, metric, start_service_process
from helpers.service_client import error_of, unique_name
from helpers.wait import wait_until
from openai import OpenAI

from service.auth import token_id

pytestmark = pytest.mark.slow

#: Every key this module was given: none may appear in replica B's log.
KEYS: list[str] = []


@pytest.fixture(scope="module")
def replica(service, redis_url, service_namespace, tmp_path_factory):
    """Replica B: same Redis prefix as the shared service, anonymous requests off, one tenant named in metrics."""
    server = start_service_process(tmp_path_factory.mktemp("tenants-replica"), {
        "GUARDRAIL_REDIS_URL": redis_url, "GUARDRAIL_REDIS_PREFIX": service_namespace,
        "GUARDRAIL_ADMIN_TOKEN": ADMIN_TOKEN, "GUARDRAIL_ALLOW_ANONYMOUS": "false",
        "GUARDRAIL_TENANT_METRIC_LABELS": "1", "GUARDRAIL_VERSION_POLL_INTERVAL_S": "1",
        "GUARDRAIL_DEFAULT_MAX_TOKENS": "8"})
    try:
        wait_until(lambda: server.get("/readyz").status_code == 200, 60, "replica ready",
                   alive=lambda: server.process.poll() is None)
        yield server
    finally:
        server.stop()


def create(server, policy: dict | None = None, name: str | None = None) -> tuple[str, str]:
    """A new tenant on ``server``: (name, key)."""
    name = name or unique_name()
    answer = server.admin("POST", "/admin/tenants", json={"name": name, "policy": policy or {}})
    assert answer.status_code == 201, answer.text
    KEYS.append(answer.json()["api_key"])
    return name, answer.json()["api_key"]


def client(server, key: str) -> OpenAI:
    # max_retries=0: the client would otherwise retry a 429 by itself, after Retry-After.
    return OpenAI(base_url=f"{server.base_url}/v1", api_key=key, max_retries=0, timeout=120)


def ask(openai_client: OpenAI, **body):
    return openai_client.chat.completions.create(model=MODEL, messages=PROMPT, temperature=0, **body)


def test_two_tenants_get_their_own_default_lists_and_limits(service):
    no_paris = unique_name()
    assert service.admin("PUT", f"/admin/wordlists/{no_paris}", json={"terms": ["Paris"]}).status_code == 201
    _, strict = create(service, {"default_wordlists": [no_paris], "max_tokens": 12})
    _, plain = create(service, {"default_wordlists": ["en"]})

    guarded = ask(client(service, strict), max_tokens=12)
    assert "paris" not in guarded.choices[0].message.content.lower(), guarded
    assert guarded.usage.model_extra["rollbacks"] >= 1
    unguarded = ask(client(service, plain), max_tokens=12)
    assert "Paris" in unguarded.choices[0].message.content, unguarded

    with pytest.raises(openai.BadRequestError) as refused:
        ask(client(service, strict), max_tokens=13)
    assert error_of(refused.value)["param"] == "max_tokens" and "API key" in error_of(refused.value)["message"]
    assert ask(client(service, plain), max_tokens=13).choices[0].finish_reason in ("stop", "length")


def test_a_tenant_over_its_request_rate_gets_429_with_retry_after_and_others_do_not(service):
    _, limited = create(service, {"requests_per_minute": 2})
    _, other = create(service, {"requests_per_minute": 2})
    for _ in range(2):
        ask(client(service, limited), max_tokens=1)
    with pytest.raises(openai.RateLimitError) as refused:
        ask(client(service, limited), max_tokens=1)
    assert error_of(refused.value)["code"] == "rate_limit_exceeded"
    assert 1 <= int(refused.value.response.headers["Retry-After"]) <= 60
    assert ask(client(service, other), max_tokens=1).choices  # its own count


def test_a_tenant_over_its_tokens_per_minute_gets_429_with_retry_after(service):
    name, key = create(service)
    first = ask(client(service, key), max_tokens=4)
    cost = first.usage.prompt_tokens + 4  # what the limit counts: prompt + n x max_tokens
    policy = {"tokens_per_minute": cost + cost // 2}  # room for one such request per minute, not two
    assert service.admin("PUT", f"/admin/tenants/{name}/policy", json=policy).status_code == 200
    ask(client(service, key), max_tokens=4)
    with pytest.raises(openai.RateLimitError) as refused:
        ask(client(service, key), max_tokens=4)
    assert int(refused.value.response.headers["Retry-After"]) >= 1
    with pytest.raises(openai.BadRequestError) as too_big:  # could never fit: not a 429 to retry
        ask(client(service, key), max_tokens=2 * cost)
    assert error_of(too_big.value)["param"] == "max_tokens"


def test_a_revoked_key_gets_401_at_once_on_every_replica(service, replica):
    name, key = create(service)
    for server in (service, replica):
        assert client(server, key).models.list().data[0].id == MODEL
    assert service.admin("POST", f"/admin/tenants/{name}/revoke").json()["revoked"] is True
    # No wait: every request looks its key up in the shared store.
    for server in (service, replica):
        with pytest.raises(openai.AuthenticationError) as refused:
            client(server, key).models.list()
        assert error_of(refused.value)["code"] == "invalid_api_key"

    rotated = replica.admin("POST", f"/admin/tenants/{name}/rotate").json()
    KEYS.append(rotated["api_key"])
    for server in (service, replica):
        assert ask(client(server, rotated["api_key"]), max_tokens=1).choices
        with pytest.raises(openai.AuthenticationError):
            client(server, key).models.list()


def test_with_anonymous_requests_disabled_a_request_without_a_tenant_key_gets_401(service, replica):
    without = httpx.post(f"{replica.base_url}/v1/check", json={"text": "hello"}, timeout=30)
    assert without.status_code == 401 and without.headers["WWW-Authenticate"] == "Bearer"
    with pytest.raises(openai.AuthenticationError):
        client(replica, "unused").models.list()
    _, key = create(replica)
    assert client(replica, key).models.list().data


def test_a_policy_refuses_lists_request_terms_and_weaker_settings_naming_the_field(service):
    no_paris = unique_name()
    assert service.admin("PUT", f"/admin/wordlists/{no_paris}", json={"terms": ["Paris"]}).status_code == 201
    _, key = create(service, {"allowed_wordlists": ["en"], "required_wordlists": [no_paris],
                              "request_terms": False, "evasion_guard": "edit", "obfuscation": "leet"})
    tenant = client(service, key)

    def refusal(call) -> dict:
        with pytest.raises(openai.PermissionDeniedError) as refused:
            call()
        return error_of(refused.value)

    assert refusal(lambda: ask(tenant, max_tokens=1, extra_body={"wordlists": ["en", "de"]}))["param"] == "wordlists.1"
    assert refusal(lambda: ask(tenant, max_tokens=1, extra_body={"bad_words": ["x"]}))["param"] == "bad_words"
    assert refusal(lambda: ask(tenant, max_tokens=1, extra_body={"evasion_guard": "substring"}))["param"] == \
        "evasion_guard"
    assert refusal(lambda: ask(tenant, max_tokens=1, extra_body={"obfuscation": "homoglyphs"}))["param"] == \
        "obfuscation"
    # The required list applies even when the request names none.
    checked = tenant.post("/check", body={"text": "Paris in spring", "wordlists": []}, cast_to=httpx.Response)
    assert checked.json()["flagged"] is True, checked.json()
    assert [w["name"] for w in checked.json()["wordlists"]] == [no_paris]


def test_the_admin_api_validates_audits_and_never_shows_a_key(service):
    assert httpx.get(f"{service.base_url}/admin/tenants", timeout=30).status_code == 401
    name, key = create(service, {"default_wordlists": ["en"]})
    again = service.admin("POST", "/admin/tenants", json={"name": name})
    assert again.status_code == 409 and again.json()["error"]["code"] == "tenant_exists"
    reserved = service.admin("POST", "/admin/tenants", json={"name": "anonymous"})
    assert reserved.status_code == 400 and reserved.json()["error"]["param"] == "name"
    unknown = service.admin("POST", "/admin/tenants", json={"name": unique_name(),
                                                            "policy": {"required_wordlists": ["no-such-list"]}})
    assert unknown.status_code == 400 and unknown.json()["error"]["param"] == "policy.required_wordlists.0"
    bad = service.admin("POST", "/admin/tenants", json={"name": unique_name(),
                                                        "policy": {"evasion_guard": "maybe"}})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "policy.evasion_guard"

    service.admin("POST", f"/admin/tenants/{name}/rotate")
    service.admin("POST", f"/admin/tenants/{name}/revoke")
    listed = service.admin("GET", "/admin/tenants").json()["data"]
    mine = next(t for t in listed if t["name"] == name)
    assert mine["revoked"] is True and mine["key_id"] is None and mine["version"] == 3
    assert "api_key" not in mine and key not in json.dumps(listed)
    audit = [r for r in service.admin("GET", "/admin/audit/tenants").json()["data"] if r["tenant"] == name]
    assert [r["action"] for r in audit] == ["revoke", "rotate", "create"]
    assert {r["token_id"] for r in audit} == {token_id(ADMIN_TOKEN)}
    assert service.admin("DELETE", f"/admin/tenants/{name}").status_code == 204
    assert service.admin("GET", f"/admin/tenants/{name}").status_code == 404


def test_a_tenant_key_manages_its_own_lists_reads_the_bundled_ones_and_sees_no_other(service):
    mine, theirs = unique_name(), unique_name()
    assert service.admin("PUT", f"/admin/wordlists/{theirs}", json={"terms": ["kumquat"]}).status_code == 201
    name, key = create(service, {"own_wordlists": [mine]})

    created = service.admin("PUT", f"/admin/wordlists/{mine}", token=key, json={"terms": ["durian"]})
    assert created.status_code == 201, created.text
    patched = service.admin("PATCH", f"/admin/wordlists/{mine}", token=key, json={"add": ["rambutan"]})
    assert patched.status_code == 200, patched.text
    assert service.admin("GET", f"/admin/wordlists/{mine}", token=key).json()["terms"][1]["text"] == "rambutan"
    assert service.admin("GET", "/admin/wordlists/en", token=key).status_code == 200
    read_only = service.admin("PATCH", "/admin/wordlists/en", token=key, json={"add": ["x"]})
    assert (read_only.status_code, read_only.json()["error"]["code"]) == (403, "not_allowed")
    # Another list is a 404, as a list that does not exist: its name does not leak.
    for method, body in (("GET", None), ("PUT", {"terms": ["x"]}), ("PATCH", {"add": ["x"]}), ("DELETE", None)):
        hidden = service.admin(method, f"/admin/wordlists/{theirs}", token=key, json=body)
        assert (hidden.status_code, hidden.json()["error"]["code"]) == (404, "wordlist_not_found"), method
    listed = {w["name"] for w in service.admin("GET", "/admin/wordlists", token=key).json()["data"]}
    assert mine in listed and "en" in listed and theirs not in listed
    assert service.admin("GET", f"/admin/wordlists/{theirs}").status_code == 200  # the admin reads every list
    for path in ("/admin/audit", "/admin/tenants"):  # every other admin route is the admin's
        assert service.admin("GET", path, token=key).status_code == 403
    audit = service.admin("GET", "/admin/audit").json()["data"]
    assert {r["token_id"] for r in audit if r["list"] == mine} == {token_id(key)}

    # /v1/check shows the terms of the lists the caller may read, else the list and the span only.
    text = {"text": "durian, kumquat and fuck", "wordlists": [mine, theirs, "en"]}

    def terms(token: str) -> dict[str, str | None]:
        answer = httpx.post(f"{service.base_url}/v1/check", json=text, timeout=30,
                            headers={"Authorization": f"Bearer {token}"})
        assert answer.status_code == 200, answer.text
        return {m["list"]: m["term"] for m in answer.json()["matches"]}

    assert terms(key) == {mine: "durian", theirs: None, "en": "fuck"}
    assert terms(CLIENT_KEY) == {mine: None, theirs: None, "en": "fuck"}
    assert terms(ADMIN_TOKEN) == {mine: "durian", theirs: "kumquat", "en": "fuck"}

    owns_bundled = service.admin("PUT", f"/admin/tenants/{name}/policy", json={"own_wordlists": [mine, "en"]})
    assert owns_bundled.status_code == 400 and owns_bundled.json()["error"]["param"] == "own_wordlists.1"
    assert service.admin("DELETE", f"/admin/wordlists/{mine}", token=key).status_code == 204


def test_the_cli_creates_rotates_and_revokes_tenants(service, replica):
    def cli(*args: str) -> dict:
        done = subprocess.run([sys.executable, "-m", "service.cli.main", "tenants", *args, "--json",
                               "--url", service.base_url], cwd=ROOT, capture_output=True, text=True, timeout=60,
                              env={"GUARDRAIL_ADMIN_TOKEN": ADMIN_TOKEN, "PATH": ""})
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    name = unique_name()
    created = cli("create", name, "--default-wordlists", "en", "--requests-per-minute", "100")
    KEYS.append(created["api_key"])
    assert created["policy"] == {"default_wordlists": ["en"], "request_terms": True, "required_wordlists": [],
                                 "allowed_wordlists": None, "evasion_guard": None, "obfuscation": None,
                                 "max_tokens": None, "requests_per_minute": 100, "tokens_per_minute": None,
                                 "own_wordlists": []}
    assert client(replica, created["api_key"]).models.list().data
    assert name in [t["name"] for t in cli("list")["data"]]
    assert cli("revoke", name)["revoked"] is True
    with pytest.raises(openai.AuthenticationError):
        client(replica, created["api_key"]).models.list()
    assert [r["action"] for r in cli("audit", "--limit", "1000")["data"] if r["tenant"] == name] == ["revoke", "create"]


def test_the_tenant_is_a_metrics_label_and_a_log_field_and_keys_never_appear_in_a_log(service, replica):
    first, first_key = create(replica)
    second, second_key = create(replica)
    for key in (first_key, second_key):
        client(replica, key).models.list()
    text = replica.metrics()
    labels = {"endpoint": "/v1/models", "status": "200"}
    # The cap is 1: the first tenant this replica served keeps its name (earlier tests may have taken it).
    named = [t for t in (first, second) if metric(text, "guardrail_requests_total", tenant=t, **labels)]
    assert len(named) <= 1
    assert metric(text, "guardrail_requests_total", tenant="other", **labels) >= 2 - len(named)
    assert metric(text, "guardrail_requests_total", tenant="none", endpoint="/admin/tenants", status="201") >= 2

    lines = [json.loads(line) for line in replica.log_tail(10**8).splitlines() if line.startswith("{")]
    requests = [line for line in lines if line.get("message") == "request" and line.get("endpoint") == "/v1/models"]
    assert {first, second} <= {line.get("tenant") for line in requests}
    log_text = replica.log_path.read_text()
    assert KEYS and not [key for key in KEYS if key in log_text or key[4:] in log_text]


def test_a_policy_put_with_a_stale_if_match_is_refused_and_changes_nothing(service):
    name, _ = create(service)
    first = service.admin("GET", f"/admin/tenants/{name}")
    etag = first.headers["ETag"]
    assert first.json()["etag"] == etag
    changed = service.admin("PUT", f"/admin/tenants/{name}/policy", json={"requests_per_minute": 5},
                            headers={"If-Match": etag})
    assert changed.status_code == 200 and changed.headers["ETag"] != etag
    stale = service.admin("PUT", f"/admin/tenants/{name}/policy", json={"requests_per_minute": 7},
                          headers={"If-Match": etag})
    assert stale.status_code == 412 and stale.json()["error"]["param"] == "If-Match"
    assert stale.headers["ETag"] == changed.headers["ETag"]
    assert service.admin("GET", f"/admin/tenants/{name}").json()["policy"]["requests_per_minute"] == 5


def test_a_rotated_key_leaves_the_previous_one_valid_until_the_new_one_is_used(service, replica):
    name, old = create(service)
    rotated = service.admin("POST", f"/admin/tenants/{name}/rotate").json()
    KEYS.append(rotated["api_key"])
    assert rotated["previous_key_id"] is not None
    assert client(replica, old).models.list().data[0].id == MODEL  # the answer could have been lost: no lockout
    assert client(replica, rotated["api_key"]).models.list().data[0].id == MODEL  # first use retires the old key
    with pytest.raises(openai.AuthenticationError):
        client(service, old).models.list()
    assert service.admin("GET", f"/admin/tenants/{name}").json()["previous_key_id"] is None
    audit = service.admin("GET", "/admin/audit/tenants").json()["data"]
    assert [r["action"] for r in audit if r["tenant"] == name][:2] == ["retire", "rotate"]
