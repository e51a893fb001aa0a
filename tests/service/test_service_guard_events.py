"""The guard's events in a stream (``stream_options.include_guard_events``): each rollback where it happened, with
the term and the retracted fragment for lists the caller may read only, and each choice's finish; nothing changes
for a stream that does not ask, and the official ``openai`` client reads the extra chunks as empty ones.
"""

from __future__ import annotations

import json

import httpx
from helpers.service import ADMIN_TOKEN, CLIENT_KEY, MODEL, PROMPT
from helpers.service_client import collect_stream, unique_name
from openai import OpenAI

BODY = {"model": MODEL, "messages": PROMPT, "temperature": 0, "max_tokens": 24, "stream": True}


def stream_chunks(service, key: str, **body) -> list[dict]:
    """Every ``data:`` chunk of a streamed chat completion (without ``[DONE]``)."""
    chunks = []
    with httpx.stream("POST", f"{service.base_url}/v1/chat/completions", json={**BODY, **body}, timeout=120,
                      headers={"Authorization": f"Bearer {key}"}) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[len("data: "):]))
    return chunks


def content(chunks: list[dict]) -> str:
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))


def test_each_rollback_is_a_chunk_where_it_happened_with_its_term_and_retracted_fragment(service):
    chunks = stream_chunks(service, CLIENT_KEY, banned_terms=["Paris"],
                           stream_options={"include_guard_events": True, "include_usage": True})
    events = [(i, c["guardrail_event"]) for i, c in enumerate(chunks) if "guardrail_event" in c]
    rollbacks = [(i, e) for i, e in events if e["type"] == "rollback"]
    assert rollbacks, chunks
    answer = content(chunks)
    assert "paris" not in answer.lower()
    for i, event in rollbacks:
        assert chunks[i]["choices"] == [] and chunks[i]["object"] == "chat.completion.chunk"
        assert chunks[i]["usage"] is None  # include_usage: every chunk but the last says null
        assert (event["list"], event["term"], event["index"]) == ("request", "Paris", 0)  # the caller's own terms
        assert "Paris" in event["fragment"] and event["attempt"] >= 1
        # Where it happened: never before the text already streamed (it is final).
        assert len(content(chunks[:i])) <= event["offset"]
    assert rollbacks[-1][1]["offset"] <= len(answer)  # the answer went on from the last one
    finish_at, finish = events[-1]
    assert finish == {"type": "finish", "index": 0, "finish_reason": chunks[finish_at + 1]["choices"][0]["finish_reason"],
                      "filtered_by": None, "rollbacks": len(rollbacks)}
    assert chunks[-1]["usage"]["rollbacks"] == len(rollbacks)


def test_a_list_the_caller_may_not_read_is_named_without_its_term_or_fragment(service):
    name = unique_name()
    assert service.admin("PUT", f"/admin/wordlists/{name}", json={"terms": ["Paris"]}).status_code == 201
    owner, stranger = (service.admin("POST", "/admin/tenants", json={"name": unique_name(), "policy": policy})
                       .json()["api_key"] for policy in ({"own_wordlists": [name]}, {}))
    seen = {}
    for who, key in (("owner", owner), ("stranger", stranger), ("admin", ADMIN_TOKEN)):
        chunks = stream_chunks(service, key, wordlists=[name], stream_options={"include_guard_events": True})
        seen[who] = [c["guardrail_event"] for c in chunks
                     if c.get("guardrail_event", {}).get("type") == "rollback"]
        assert seen[who] and all(e["list"] == name for e in seen[who])
    assert {(e["term"], "Paris" in e["fragment"]) for e in seen["owner"] + seen["admin"]} == {("Paris", True)}
    assert {(e["term"], e["fragment"]) for e in seen["stranger"]} == {(None, None)}
    assert [e["position"] for e in seen["stranger"]] == [e["position"] for e in seen["owner"]]  # where, not what


def test_a_stream_that_does_not_ask_has_no_guard_events_and_the_openai_client_reads_one_that_does(service):
    assert not any("guardrail_event" in c for c in stream_chunks(service, CLIENT_KEY, banned_terms=["Paris"]))
    client = OpenAI(base_url=f"{service.base_url}/v1", api_key=CLIENT_KEY, max_retries=0, timeout=120)
    stream = client.chat.completions.create(**BODY, extra_body={
        "banned_terms": ["Paris"], "stream_options": {"include_guard_events": True}})
    pieces, reasons, _ = collect_stream(stream)
    assert pieces and "paris" not in "".join(pieces).lower() and reasons in (["stop"], ["length"])
