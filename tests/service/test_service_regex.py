"""Regex terms through the service (real SmolLM2, Redis store): stored with the admin API (``re:`` text), bad
ones refused with a 400 naming the field, the term and the construct while the previous version keeps
serving, reported by ``/v1/check``, and banned per request in a chat whose stream never carries a match."""

from __future__ import annotations

import pytest
from helpers.service import CLIENT_KEY
from helpers.service_client import GREEDY, check, collect_stream, unique_name

from guardrail.matching.textmatch import TextMatcher
from guardrail.wordlists.wordlist import wordlist_from_terms

pytestmark = pytest.mark.slow

SORRY = "re:s[o0]rr(?:y|ies)"


def test_admin_stores_reads_and_removes_regex_terms(service):
    name = unique_name()
    put = service.admin("PUT", f"/admin/wordlists/{name}", json={
        "terms": [SORRY, {"text": "re:P[a4]r[i1]s", "case_sensitive": True}, "\\re:literal"]})
    assert put.status_code == 201, put.text
    read = service.admin("GET", f"/admin/wordlists/{name}").json()["terms"]
    assert read == [{"text": SORRY, "match": "word", "case_sensitive": False, "obfuscation": None},
                    {"text": "re:P[a4]r[i1]s", "match": "word", "case_sensitive": True, "obfuscation": None},
                    {"text": "\\re:literal", "match": "word", "case_sensitive": False, "obfuscation": None}]
    # What GET returns can be sent back as it is.
    assert service.admin("PUT", f"/admin/wordlists/{name}", json={"terms": read}).status_code == 200
    found = check(service, "So S0RRY about P4ris, paris and re:literal.", wordlists=[name])
    assert {(m["term"], m["text"]) for m in found["matches"]} == {
        (SORRY, "S0RRY"), ("re:P[a4]r[i1]s", "P4ris"), ("\\re:literal", "re:literal")}
    patched = service.admin("PATCH", f"/admin/wordlists/{name}", json={"add": ["re:d[a4]rn"], "remove": [SORRY]})
    assert patched.status_code == 200, patched.text
    assert [t["text"] for t in service.admin("GET", f"/admin/wordlists/{name}").json()["terms"]] == [
        "re:P[a4]r[i1]s", "\\re:literal", "re:d[a4]rn"]


@pytest.mark.parametrize(("term", "construct"), [
    ("re:s(?=orry)", "look-ahead"), ("re:(s)\\1", "back-reference"), ("re:so+rry", "unbounded repetition"),
    ("re:a.{0,40}b", "automaton states"),
])
def test_a_bad_regex_is_a_400_naming_field_term_and_construct_and_changes_nothing(service, term, construct):
    name = unique_name()
    assert service.admin("PUT", f"/admin/wordlists/{name}", json={"terms": ["kumquat"]}).status_code == 201
    for method, body, param in (("PUT", {"terms": ["kumquat", term]}, "terms.1"),
                                ("PATCH", {"add": [term]}, "add.0")):
        refused = service.admin(method, f"/admin/wordlists/{name}", json=body)
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert (error["param"], error["code"]) == (param, "invalid_term")
        assert repr(term) in error["message"] and construct in error["message"], error["message"]
    read = service.admin("GET", f"/admin/wordlists/{name}")
    assert read.headers["ETag"].startswith('"v1-') and [t["text"] for t in read.json()["terms"]] == ["kumquat"]
    assert check(service, "a kumquat", wordlists=[name])["flagged"] is True


def test_a_request_regex_term_is_checked_and_enforced(service, openai_client):
    found = service.post("/v1/check", json={"text": "I'm s0rry, SORRY.", "wordlists": [], "banned_terms": [SORRY]},
                         headers={"Authorization": f"Bearer {CLIENT_KEY}"}).json()
    assert [(m["term"], m["list"], m["text"]) for m in found["matches"]] == [
        (SORRY, "request", "s0rry"), (SORRY, "request", "SORRY")]
    bad = service.post("/v1/check", json={"text": "x", "banned_terms": ["ok", "re:(?<=x)y"]},
                       headers={"Authorization": f"Bearer {CLIENT_KEY}"})
    assert (bad.status_code, bad.json()["error"]["param"]) == (400, "banned_terms.1")
    assert "look-behind" in bad.json()["error"]["message"]
    # A chat with the regex as a request term: the model says "Paris"; no streamed prefix ever matches.
    regex = "re:p[a4]r[i1]s"
    verifier = TextMatcher([wordlist_from_terms([regex])])
    stream = openai_client.chat.completions.create(
        **GREEDY, stream=True, stream_options={"include_usage": True}, extra_body={"banned_terms": [regex]})
    pieces, reasons, usage = collect_stream(stream)
    sent = ""
    for piece in pieces:
        sent += piece
        assert verifier.scan(sent) == [], sent
    assert usage.model_extra["rollbacks"] >= 1 and reasons == ["stop"]
    assert sent.startswith("The capital of France is")
