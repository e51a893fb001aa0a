"""The admin API: credentials, optimistic concurrency, limits, audit, and changes that take effect
without a restart, on this replica at once and on another replica sharing Redis within seconds."""

from __future__ import annotations

import httpx
import pytest
from helpers.service import ADMIN_TOKEN, CLIENT_KEY, start_service_process
from helpers.service_client import check, unique_name
from helpers.wait import wait_until

from service.auth import token_id

pytestmark = pytest.mark.slow


def enforces(server, name: str, text: str) -> bool:
    """Whether ``server`` flags ``text`` with list ``name`` (a list of one term that ``text`` contains).

    'Not yet' (False, keep polling): a list it has not heard of yet (404 ``wordlist_not_found``: the change
    is still on its way over pub/sub or the poll) and an answer that did not come (connection errors and
    timeouts, which ``wait_until`` counts as not yet). Failures (AssertionError at once): any other status,
    and a list it knows that does not flag the text, which no later poll can change (the name is new, so
    version 1 is the only version there is)."""
    response = server.post("/v1/check", json={"text": text, "wordlists": [name]},
                           headers={"Authorization": f"Bearer {CLIENT_KEY}"})
    if response.status_code == 404 and response.json()["error"]["code"] == "wordlist_not_found":
        return False
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["wordlists"] == [{"name": name, "version": 1}], body
    assert body["flagged"], body  # the list arrived but does not apply: a wrong final state
    return True


def test_admin_needs_the_bearer_token(service):
    missing = httpx.put(f"{service.base_url}/admin/wordlists/x", json={"terms": ["a1"]})
    assert missing.status_code == 401
    assert missing.headers["WWW-Authenticate"] == "Bearer"
    assert missing.json()["error"]["type"] == "authentication_error"
    wrong = service.admin("GET", "/admin/wordlists", token="not-the-token")
    assert wrong.status_code == 403
    assert wrong.json()["error"]["code"] == "invalid_token"
    client_key = service.admin("GET", "/admin/wordlists", token=CLIENT_KEY)
    assert client_key.status_code == 403  # a client key is not an admin credential


def test_put_creates_then_replaces_with_versions_and_etags(service):
    name = unique_name()
    created = service.admin("PUT", f"/admin/wordlists/{name}", json={"terms": ["kumquat"]})
    assert created.status_code == 201, created.text
    assert created.headers["ETag"].startswith('"v1-') and created.json()["terms"] == 1
    replaced = service.admin("PUT", f"/admin/wordlists/{name}", json={
        "terms": ["kumquat", {"text": "Durian", "match": "prefix", "case_sensitive": True}], "allow": ["kumquats"]})
    assert replaced.status_code == 200 and replaced.headers["ETag"].startswith('"v2-')
    read = service.admin("GET", f"/admin/wordlists/{name}")
    assert read.headers["ETag"].startswith('"v2-')
    assert read.json()["terms"] == [
        {"text": "kumquat", "match": "word", "case_sensitive": False, "obfuscation": None},
        {"text": "Durian", "match": "prefix", "case_sensitive": True, "obfuscation": None},
    ]
    assert read.json()["allow"] == ["kumquats"]
    assert read.json()["obfuscation"] is None  # the request's or the server's level applies
    listed = {w["name"]: w for w in service.admin("GET", "/admin/wordlists").json()["data"]}
    assert listed[name]["version"] == 2 and listed["en"]["default"] is True


def test_a_stale_if_match_is_refused_with_412_and_the_list_is_unchanged(service):
    name = unique_name()
    etag = service.admin("PUT", f"/admin/wordlists/{name}", json={"terms": ["fig"]}).headers["ETag"]
    assert service.admin("PUT", f"/admin/wordlists/{name}", json={"terms": ["date"]},
                         headers={"If-Match": etag}).status_code == 200
    stale = service.admin("PUT", f"/admin/wordlists/{name}", json={"terms": ["lime"]}, headers={"If-Match": etag})
    assert stale.status_code == 412
    assert stale.headers["ETag"].startswith('"v2-')
    assert stale.json()["error"]["param"] == "If-Match"
    stale_patch = service.admin("PATCH", f"/admin/wordlists/{name}", json={"add": ["lime"]}, headers={"If-Match": etag})
    assert stale_patch.status_code == 412
    assert [t["text"] for t in service.admin("GET", f"/admin/wordlists/{name}").json()["terms"]] == ["date"]
    exists = service.admin("PUT", f"/admin/wordlists/{name}", json={"terms": ["lime"]}, headers={"If-None-Match": "*"})
    assert exists.status_code == 412


def test_kept_versions_are_listed_read_and_written_back_with_put(service):
    name = unique_name()
    service.admin("PUT", f"/admin/wordlists/{name}", json={
        "terms": [{"text": "Quince", "match": "prefix", "case_sensitive": True}], "allow": ["quinces"]})
    service.admin("PATCH", f"/admin/wordlists/{name}", json={"add": ["medlar"]})
    versions = service.admin("GET", f"/admin/wordlists/{name}/versions").json()["data"]
    assert [(v["version"], v["terms"], v["allow"], v["current"]) for v in versions] == [
        (2, 2, 1, True), (1, 1, 1, False)]
    first = service.admin("GET", f"/admin/wordlists/{name}/versions/1")
    assert first.status_code == 200 and first.json()["version"] == 1
    body = {k: first.json()[k] for k in ("terms", "allow", "obfuscation")}  # a version's body is a PUT body
    current = service.admin("GET", f"/admin/wordlists/{name}").headers["ETag"]
    restored = service.admin("PUT", f"/admin/wordlists/{name}", json=body, headers={"If-Match": current})
    assert restored.status_code == 200 and restored.headers["ETag"].startswith('"v3-')
    assert service.admin("GET", f"/admin/wordlists/{name}").json()["terms"] == first.json()["terms"]
    missing = service.admin("GET", f"/admin/wordlists/{name}/versions/9")
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "version_not_found")
    assert service.admin("GET", "/admin/wordlists/never-written/versions").status_code == 404
    assert service.admin("GET", f"/admin/wordlists/{name}/versions", token=CLIENT_KEY).status_code == 403
    owner, stranger = (service.admin("POST", "/admin/tenants", json={"name": unique_name(), "policy": policy})
                       .json()["api_key"] for policy in ({"own_wordlists": [name]}, {}))
    assert service.admin("GET", f"/admin/wordlists/{name}/versions/1", token=owner).status_code == 200
    for path in ("versions", "versions/1"):  # another tenant's list does not exist for it
        assert service.admin("GET", f"/admin/wordlists/{name}/{path}", token=stranger).status_code == 404


def test_an_oversized_list_is_refused_with_413(service):
    name = unique_name()
    limit = service.runtime.settings.max_list_terms
    too_many = service.admin("PUT", f"/admin/wordlists/{name}", json={"terms": [f"w{i}" for i in range(limit + 1)]})
    assert too_many.status_code == 413, too_many.text[:300]
    assert too_many.json()["error"]["param"] == "terms"
    assert service.admin("GET", f"/admin/wordlists/{name}").status_code == 404
    huge_body = b'{"terms": ["' + b"x" * (service.runtime.settings.max_body_bytes + 1) + b'"]}'
    too_big = service.admin("PUT", f"/admin/wordlists/{name}", content=huge_body,
                            headers={"Content-Type": "application/json"})
    assert too_big.status_code == 413 and too_big.json()["error"]["code"] == "request_too_large"


def test_invalid_terms_and_names_are_400_naming_the_field(service):
    long_term = service.admin("PUT", "/admin/wordlists/good-name", json={"terms": ["ok", "x" * 257]})
    assert (long_term.status_code, long_term.json()["error"]["param"]) == (400, "terms.1")
    no_letters = service.admin("PUT", "/admin/wordlists/good-name", json={"terms": ["ok", "!!!"]})
    assert (no_letters.status_code, no_letters.json()["error"]["param"]) == (400, "terms.1")
    bad_allow = service.admin("PUT", "/admin/wordlists/good-name", json={"terms": ["ok"], "allow": ["a\nb"]})
    assert (bad_allow.status_code, bad_allow.json()["error"]["param"]) == (400, "allow.0")
    bad_name = service.admin("PUT", "/admin/wordlists/..secret", json={"terms": ["ok"]})
    assert (bad_name.status_code, bad_name.json()["error"]["param"]) == (400, "name")


def test_patch_adds_and_removes_terms_and_delete_removes_the_list(service):
    name = unique_name()
    service.admin("PUT", f"/admin/wordlists/{name}", json={"terms": ["apple", "pear"]})
    patched = service.admin("PATCH", f"/admin/wordlists/{name}", json={"add": ["plum"], "remove": ["APPLE"]})
    assert patched.status_code == 200 and patched.headers["ETag"].startswith('"v2-')
    assert [t["text"] for t in service.admin("GET", f"/admin/wordlists/{name}").json()["terms"]] == ["pear", "plum"]
    assert check(service, "a plum", wordlists=[name])["flagged"] is True
    assert service.admin("DELETE", f"/admin/wordlists/{name}").status_code == 204
    assert service.admin("GET", f"/admin/wordlists/{name}").status_code == 404
    assert service.admin("DELETE", f"/admin/wordlists/{name}").status_code == 404
    gone = service.post("/v1/check", json={"text": "a plum", "wordlists": [name]},
                        headers={"Authorization": f"Bearer {CLIENT_KEY}"})
    assert (gone.status_code, gone.json()["error"]["param"]) == (404, "wordlists")


def test_a_list_of_the_default_set_cannot_be_deleted(service):
    refused = service.admin("DELETE", "/admin/wordlists/en")
    assert refused.status_code == 409
    assert "GUARDRAIL_WORDLISTS" in refused.json()["error"]["message"]


def test_every_change_is_in_the_audit_log_with_the_token_id(service):
    name = unique_name()
    service.admin("PUT", f"/admin/wordlists/{name}", json={"terms": ["a1", "b2"]})
    service.admin("PATCH", f"/admin/wordlists/{name}", json={"add": ["c3"], "remove": ["a1"]})
    service.admin("DELETE", f"/admin/wordlists/{name}")
    records = [r for r in service.admin("GET", "/admin/audit?limit=1000").json()["data"] if r["list"] == name]
    assert [(r["action"], r["version"], r["added"], r["removed"]) for r in records] == [
        ("delete", 3, 0, 2), ("update", 2, 1, 1), ("create", 1, 2, 0)]
    assert {r["token_id"] for r in records} == {token_id(ADMIN_TOKEN)}
    assert ADMIN_TOKEN not in str(records)


def test_after_a_put_the_next_chat_enforces_the_new_list_without_restart(service):
    before = service.chat().json()["choices"][0]["message"]["content"]
    assert "Paris" in before
    english = service.admin("GET", "/admin/wordlists/en")
    terms, allow, etag = english.json()["terms"], english.json()["allow"], english.headers["ETag"]
    put = service.admin("PUT", "/admin/wordlists/en", json={"terms": [*terms, "Paris"], "allow": allow},
                        headers={"If-Match": etag})
    assert put.status_code == 200, put.text
    try:
        after = service.chat().json()  # the default set, now with the new version of "en"
        assert "paris" not in after["choices"][0]["message"]["content"].lower()
        assert after["usage"]["rollbacks"] >= 1
    finally:
        service.admin("PUT", "/admin/wordlists/en", json={"terms": terms, "allow": allow})
    assert "Paris" in service.chat().json()["choices"][0]["message"]["content"]


def test_a_change_on_one_replica_is_enforced_by_another_within_5_seconds(service, redis_url, service_namespace,
                                                                          tmp_path):
    replica = start_service_process(tmp_path, {
        "GUARDRAIL_REDIS_URL": redis_url, "GUARDRAIL_REDIS_PREFIX": service_namespace,
        "GUARDRAIL_API_KEYS": CLIENT_KEY, "GUARDRAIL_VERSION_POLL_INTERVAL_S": "1"})
    try:
        def alive() -> bool:
            return replica.process.poll() is None

        wait_until(lambda: replica.get("/readyz").status_code == 200, 30, "replica ready", alive=alive)
        name = unique_name()
        assert check(replica, "Paris", token=CLIENT_KEY, banned_terms=["x1"])["flagged"] is False
        assert service.admin("PUT", f"/admin/wordlists/{name}", json={"terms": ["Paris"]}).status_code == 201
        # The 5 s deadline starts once the change is stored (the PUT answered): the replica has its pub/sub
        # hint at once and its 1 s poll as a fallback. enforces() says 'not yet' only while the list has not
        # arrived; a wrong answer fails at once, so the deadline is the only timing the test has.
        wait_until(lambda: enforces(replica, name, "Paris is nice"), 5, "the replica enforcing the new list",
                   alive=alive, interval_s=0.05)
        answer = replica.chat(wordlists=["en", name]).json()
        assert "paris" not in answer["choices"][0]["message"]["content"].lower(), answer
        assert answer["usage"]["rollbacks"] >= 1
    finally:
        replica.stop()
