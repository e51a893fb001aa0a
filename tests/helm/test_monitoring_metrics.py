"""Every metric the alert rules and the Grafana dashboard query exists, as the service really exposes it.

The names are read from ``helm/guardrail/files/alerts.yaml`` and ``helm/guardrail/files/dashboards/guardrail.json``
and checked against ``docs/metrics.md`` and against the ``/metrics`` output of a live service (uvicorn with
``service.app:create_app`` on a free loopback port, its own Redis server so that ``guardrail_redis_up`` is
declared, the embedded data directory in a temporary directory, the shared model cache).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import httpx
import pytest
import yaml
from helpers.paths import ROOT
from helpers.service import free_port
from helpers.wait import wait_until

ALERTS = ROOT / "helm" / "guardrail" / "files" / "alerts.yaml"
DASHBOARD = ROOT / "helm" / "guardrail" / "files" / "dashboards" / "guardrail.json"
METRICS_DOC = ROOT / "docs" / "metrics.md"

METRIC_NAME = re.compile(r"\bguardrail_[a-z0-9_]+\b")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
# Labels Prometheus adds at scrape time (ServiceMonitor) or that histograms carry, not the service.
TARGET_LABELS = {"namespace", "job", "pod", "instance", "service", "le"}
# `sum by (endpoint, status) (rate(guardrail_requests_total...` -> labels the query expects on that metric.
GROUPED_QUERY = re.compile(r"by \(([^)]*)\) \((?:rate\()?(guardrail_[a-z0-9_]+)")
MODEL_LOAD_TIMEOUT_S = 300


def alert_queries() -> list[str]:
    rules = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


def dashboard_queries() -> list[str]:
    board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    queries = [t["expr"] for p in board["panels"] if p["type"] != "row" for t in p["targets"]]
    queries += [v["definition"] for v in board["templating"]["list"] if v["type"] == "query"]
    return queries


def used_series() -> set[str]:
    """Sample names the rules and the dashboard query (``guardrail_x_bucket`` stays as written)."""
    return {name for query in alert_queries() + dashboard_queries() for name in METRIC_NAME.findall(query)}


def family_of(sample: str, histograms: set[str]) -> str:
    for suffix in HISTOGRAM_SUFFIXES:
        if sample.endswith(suffix) and sample.removesuffix(suffix) in histograms:
            return sample.removesuffix(suffix)
    return sample


def documented_metrics() -> dict[str, str]:
    """``docs/metrics.md`` table: metric name -> type."""
    rows = re.findall(r"^\| `(guardrail_[a-z0-9_]+)` \| (\w+) \|", METRICS_DOC.read_text(encoding="utf-8"), re.M)
    assert rows, "no metric rows found in docs/metrics.md"
    return dict(rows)


def test_every_metric_in_the_rules_and_dashboard_is_documented():
    documented = documented_metrics()
    histograms = {name for name, kind in documented.items() if kind == "histogram"}
    for sample in sorted(used_series()):
        family = family_of(sample, histograms)
        assert family in documented, f"{sample} is queried but not in docs/metrics.md"
        if sample != family:
            assert documented[family] == "histogram", sample


def test_the_dashboard_shows_every_documented_metric():
    histograms = {name for name, kind in documented_metrics().items() if kind == "histogram"}
    shown = {family_of(name, histograms) for query in dashboard_queries() for name in METRIC_NAME.findall(query)}
    assert set(documented_metrics()) - shown == set()


# -- against the live service ----------------------------------------------------------------------------


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def metrics_text(tmp_path_factory) -> str:
    """``/metrics`` of a live service after one streamed chat completion."""
    if not (ROOT / "service" / "app.py").is_file():
        pytest.fail("service/app.py (the app factory service.app:create_app) does not exist yet")
    redis_server = shutil.which("redis-server")
    assert redis_server, "redis-server is needed for guardrail_redis_up (Debian package redis-server)"
    tmp = tmp_path_factory.mktemp("metrics")
    redis_port, http_port = free_port(), free_port()
    redis = subprocess.Popen(
        [redis_server, "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(tmp)],
        stdout=subprocess.DEVNULL,
    )
    log = (tmp / "service.log").open("w")
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "GUARDRAIL_REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
        "GUARDRAIL_DATA_DIR": str(tmp / "data"),
    }
    # GUARDRAIL_CACHE_DIR stays as the run has it: the model cache is content-addressed and shared with
    # the other model tests, so the service loads converted weights in seconds instead of converting
    # the gguf again (~1 min on 2 cores).
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--factory", "service.app:create_app",
         "--host", "127.0.0.1", "--port", str(http_port)],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{http_port}"
    try:
        wait_until(lambda: httpx.get(f"{base}/healthz", timeout=2).status_code == 200,
                   MODEL_LOAD_TIMEOUT_S, "service /healthz", alive=lambda: server.poll() is None)
        wait_until(lambda: httpx.get(f"{base}/readyz", timeout=2).status_code == 200, 60, "service /readyz",
                   alive=lambda: server.poll() is None)
        request = {"model": "smollm2", "messages": [{"role": "user", "content": "Say hello."}],
                   "max_tokens": 8, "stream": True, "seed": 1}
        with httpx.stream("POST", f"{base}/v1/chat/completions", json=request, timeout=120) as response:
            assert response.status_code == 200, response.read()
            assert any(line.strip() == "data: [DONE]" for line in response.iter_lines())
        return httpx.get(f"{base}/metrics", timeout=10).text
    except AssertionError:
        log.flush()
        raise AssertionError((tmp / "service.log").read_text()[-4000:]) from None
    finally:
        stop(server)
        stop(redis)
        log.close()


def declared_families(text: str) -> dict[str, str]:
    """``# TYPE name kind`` lines: every metric the registry declares, with or without samples."""
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))


@pytest.mark.slow
def test_every_metric_in_the_rules_and_dashboard_is_exposed_by_the_service(metrics_text):
    families = declared_families(metrics_text)
    histograms = {name for name, kind in families.items() if kind == "histogram"}
    missing = sorted(sample for sample in used_series() if family_of(sample, histograms) not in families)
    assert not missing, f"queried but not exposed by /metrics: {missing}"
    for sample in used_series():
        family = family_of(sample, histograms)
        if sample.endswith("_total"):
            assert families[family] == "counter", sample


@pytest.mark.slow
def test_labels_the_queries_group_by_are_on_the_exposed_series(metrics_text):
    sample_labels: dict[str, set[str]] = {}
    for name, labels in re.findall(r"^(guardrail_[a-z0-9_]+)\{([^}]*)\}", metrics_text, re.M):
        sample_labels.setdefault(name, set()).update(re.findall(r'(\w+)="', labels))
    checked = 0
    for query in alert_queries() + dashboard_queries():
        for labels, name in GROUPED_QUERY.findall(query):
            wanted = {label.strip() for label in labels.split(",")} - TARGET_LABELS
            if wanted and name in sample_labels:  # a labelled family shows labels once it has a sample
                assert wanted <= sample_labels[name], (name, wanted, sample_labels[name])
                checked += 1
    assert checked, "no labelled series after a chat request: requests_total{endpoint,status} at least"


@pytest.mark.slow
def test_a_streamed_chat_request_fills_the_request_and_ttft_series(metrics_text):
    assert re.search(r'^guardrail_requests_total\{[^}]*status="200"[^}]*\} [1-9]', metrics_text, re.M)
    assert re.search(r"^guardrail_time_to_first_token_seconds_count\{[^}]*\} [1-9]", metrics_text, re.M)
    assert re.search(r"^guardrail_redis_up 1\.0$", metrics_text, re.M)
