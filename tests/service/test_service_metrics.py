"""``/metrics``: passes ``promtool check metrics``, declares every metric of docs/metrics.md, and counts
exactly what a known sequence of requests did."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
from helpers.paths import ROOT
from helpers.service import CLIENT_KEY, MODEL, metric

pytestmark = pytest.mark.slow

METRICS_DOC = ROOT / "docs" / "metrics.md"
AUTH = {"Authorization": f"Bearer {CLIENT_KEY}"}


def test_metrics_pass_promtool(service):
    promtool = shutil.which("promtool")
    assert promtool, "promtool is needed: apt-get install -y --no-install-recommends prometheus"
    service.chat(max_tokens=2)  # so that labelled families have samples too
    checked = subprocess.run([promtool, "check", "metrics"], input=service.metrics(), capture_output=True,
                             text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_every_documented_metric_is_declared_with_its_type(service):
    documented = dict(re.findall(r"^\| `(guardrail_[a-z0-9_]+)` \| (\w+) \|", METRICS_DOC.read_text(), re.M))
    declared = dict(re.findall(r"^# TYPE (\S+) (\S+)$", service.metrics(), re.M))
    for name, kind in documented.items():
        assert declared.get(name) == kind, f"{name}: documented as {kind}, declared {declared.get(name)}"


def test_a_known_sequence_of_requests_is_counted_exactly(service):
    before = service.metrics()
    chat = service.chat(max_tokens=6).json()
    streamed = service.post("/v1/chat/completions", headers=AUTH, json={
        "model": MODEL, "messages": [{"role": "user", "content": "What is the capital of France?"}],
        "temperature": 0, "max_tokens": 24, "stream": True, "stream_options": {"include_usage": True},
        "banned_terms": ["Paris"]})
    usage_event = [line for line in streamed.text.splitlines() if '"usage"' in line][-1]
    streamed_usage = json.loads(usage_event.removeprefix("data: "))["usage"]
    assert service.post("/v1/check", json={"text": "hello"}, headers=AUTH).status_code == 200
    assert service.chat(temperature=9).status_code == 400
    assert service.chat(model="gpt-4o").status_code == 404
    after = service.metrics()

    def grew(name: str, **labels: str) -> float:
        return metric(after, name, **labels) - metric(before, name, **labels)

    chat_endpoint = "/v1/chat/completions"
    assert grew("guardrail_requests_total", endpoint=chat_endpoint, status="200") == 2
    assert grew("guardrail_requests_total", endpoint=chat_endpoint, status="400") == 1
    assert grew("guardrail_requests_total", endpoint=chat_endpoint, status="404") == 1
    assert grew("guardrail_requests_total", endpoint="/v1/check", status="200") == 1
    assert grew("guardrail_request_duration_seconds_count", endpoint=chat_endpoint) == 4
    assert grew("guardrail_time_to_first_token_seconds_count", endpoint=chat_endpoint) == 1
    reasons = {"stop", "length"}
    assert sum(grew("guardrail_finishes_total", reason=r) for r in reasons) == 2
    tokens = chat["usage"]["completion_tokens"] + streamed_usage["completion_tokens"]
    assert grew("guardrail_generation_tokens_total", model_name=MODEL) == tokens
    passes = chat["usage"]["forward_passes"] + streamed_usage["forward_passes"]
    assert grew("guardrail_forward_passes_total") == passes
    assert grew("guardrail_rollbacks_total", list="request") == streamed_usage["rollbacks"] >= 1
    prompts = chat["usage"]["prompt_tokens"] + streamed_usage["prompt_tokens"]
    assert grew("guardrail_prompt_tokens_total", model_name=MODEL) == prompts
    assert grew("guardrail_request_queue_time_seconds_count", model_name=MODEL) == 2
    assert grew("guardrail_e2e_request_latency_seconds_count", model_name=MODEL) == 2
    assert grew("guardrail_request_time_per_output_token_seconds_count") >= 1  # choices with 2+ tokens after text
    # vLLM's per-request histograms: one observation per choice, summing to the answers' usage.
    assert grew("guardrail_request_prompt_tokens_count", model_name=MODEL) == 2
    assert grew("guardrail_request_prompt_tokens_sum", model_name=MODEL) == prompts
    assert grew("guardrail_request_generation_tokens_sum", model_name=MODEL) == tokens
    assert sum(grew("guardrail_request_success_total", model_name=MODEL, finished_reason=r) for r in reasons) == 2
    assert grew("guardrail_inter_token_latency_seconds_count", model_name=MODEL) >= 1  # the streamed answer's deltas
    # The guard's own: rollbacks per choice, the tokens they dropped, the guard's time per step.
    rollbacks = chat["usage"]["rollbacks"] + streamed_usage["rollbacks"]
    assert grew("guardrail_request_rollbacks_count") == 2
    assert grew("guardrail_request_rollbacks_sum") == rollbacks
    assert grew("guardrail_rollback_discarded_tokens_total", list="request") >= 1  # " Paris" was generated first
    assert grew("guardrail_guard_step_seconds_count") == 2  # both choices judged tokens
    assert grew("guardrail_guard_step_seconds_sum") > 0
    lookups = sum(grew("guardrail_artefact_cache_lookups_total", layer=layer)
                  for layer in ("memory", "redis", "disk", "compile"))
    assert lookups == 2  # one artefact lookup per generation
    assert metric(after, "guardrail_inflight_requests") == 0  # the scrape itself is not counted
    assert metric(after, "guardrail_queue_depth") == 0
    assert metric(after, "guardrail_num_requests_waiting", model_name=MODEL) == 0
    assert metric(after, "guardrail_num_requests_running", model_name=MODEL) == 0
    assert metric(after, "guardrail_wordlist_version", list="en") >= 1


def test_escalations_are_counted_and_a_request_can_switch_the_evasion_guard_off(service):
    """"Paris" banned: its hit escalates it (the server's default evasion guard), once per generation; with
    the request's ``evasion_guard: "off"`` nothing escalates."""
    def ask(**extra):
        return service.post("/v1/chat/completions", headers=AUTH, json={
            "model": MODEL, "messages": [{"role": "user", "content": "What is the capital of France?"}],
            "temperature": 0, "max_tokens": 24, "banned_terms": ["Paris"], **extra}).json()

    before = service.metrics()
    default = ask()
    after_default = service.metrics()
    off = ask(evasion_guard="off")
    after_off = service.metrics()
    assert default["usage"]["rollbacks"] >= 1 and off["usage"]["rollbacks"] >= 1
    assert metric(after_default, "guardrail_escalations_total", list="request") - metric(
        before, "guardrail_escalations_total", list="request") == 1
    evasions = metric(after_default, "guardrail_evasion_rollbacks_total", list="request") - metric(
        before, "guardrail_evasion_rollbacks_total", list="request")
    assert 0 <= evasions < default["usage"]["rollbacks"]  # the first rollback is the word itself
    for name in ("guardrail_escalations_total", "guardrail_evasion_rollbacks_total"):
        assert metric(after_off, name, list="request") == metric(after_default, name, list="request")


def test_build_info_names_the_version_and_the_model(service):
    import guardrail

    assert metric(service.metrics(), "guardrail_build_info", version=guardrail.__version__, model=MODEL) == 1


def test_time_to_first_token_buckets_reach_past_two_minutes(service):
    bounds = [float(b) for b in re.findall(r'guardrail_time_to_first_token_seconds_bucket\{[^}]*le="([0-9.e+]+)"',
                                           service.metrics())]
    assert max(bounds) >= 120  # waits of 63 s were measured; the old buckets ended at 30 s


def test_a_spent_rollback_budget_is_counted_by_the_list_that_spent_it(service):
    """``max_rollbacks: 0`` and "Paris" banned: the first hit ends the choice with content_filter, blamed on the
    request's own list (``filtered_by``), counted once by list and once as a vLLM-style success."""
    before = service.metrics()
    answer = service.chat("What is the capital of France?", banned_terms=["Paris"], max_rollbacks=0).json()
    after = service.metrics()
    assert answer["choices"][0]["finish_reason"] == "content_filter"
    assert answer["choices"][0]["guardrail"]["filtered_by"] == "request"

    def grew(name: str, **labels: str) -> float:
        return metric(after, name, **labels) - metric(before, name, **labels)

    assert grew("guardrail_content_filter_finishes_total", list="request") == 1
    assert grew("guardrail_request_success_total", model_name=MODEL, finished_reason="content_filter") == 1
    # The hit that spends the budget cuts the answer instead of rolling back: usage.rollbacks counts it, the
    # rollback counter does not, the content_filter counter does.
    assert grew("guardrail_rollbacks_total", list="request") == 0
    assert grew("guardrail_request_rollbacks_sum") == answer["usage"]["rollbacks"] == 1
