"""Operations at a glance: readiness (``GET /readyz``), the engine and model (``/readyz``, ``GET /v1/models``), the
lists loaded (their versions), and the guard's counters from ``GET /metrics`` (rollbacks, content filters,
requests). ``GET /console/ops/counters`` gives the counters as JSON: ``static/ops.js`` polls it and draws each as a
small chart of its rate over the last minutes (samples kept in the browser's session storage)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, Response

from service.console.context import Page, error_text, signed_in

#: The counters charted: key -> (metric family name, label filter: ``endpoint`` prefix for requests).
COUNTERS = {
    "rollbacks": "guardrail_rollbacks",
    "content_filters": "guardrail_content_filter_finishes",
    "requests": "guardrail_requests",
}
#: How often the page polls, seconds (ops.js reads it from the page).
POLL_S = 5


def counters(exposition: str) -> dict[str, Any]:
    """The charted counters from a ``/metrics`` exposition: totals (requests: the ``/v1`` ones), and the
    rollbacks by list."""
    totals = dict.fromkeys(COUNTERS, 0.0)
    by_list: dict[str, float] = {}
    for family in text_string_to_metric_families(exposition):
        for key, name in COUNTERS.items():
            if family.name != name:
                continue
            for sample in family.samples:
                if not sample.name.endswith("_total"):
                    continue
                if key == "requests" and not sample.labels.get("endpoint", "").startswith("/v1/"):
                    continue
                totals[key] += sample.value
                if key == "rollbacks":
                    name = sample.labels.get("list", "")
                    by_list[name] = by_list.get(name, 0) + sample.value
    return {"time": time.time(), **totals, "rollbacks_by_list": by_list}


async def _read_counters(page: Page) -> tuple[dict[str, Any] | None, str | None]:
    answer = await page.api.call("GET", "/metrics")
    if not answer.is_success:
        return None, f"/metrics answered HTTP {answer.status_code}"
    return await run_in_threadpool(counters, answer.text), None  # parsing the exposition: off the event loop


@signed_in()
async def ops(page: Page) -> Response:
    readiness, (models, failure), (lists, list_failure), (totals, metrics_failure) = await asyncio.gather(
        page.api.call("GET", "/readyz"), page.api.get_json("/v1/models"), page.api.get_json("/admin/wordlists"),
        _read_counters(page))
    ready = readiness.json() if readiness.headers.get("content-type", "").startswith("application/json") else {}
    return page.render("ops.html", title="Operations", ready=ready, ready_status=readiness.status_code,
                       model=(models or {"data": [{}]})["data"][0], lists=(lists or {}).get("data", []),
                       totals=totals, poll_s=POLL_S,
                       failure=error_text(failure or list_failure) or metrics_failure)


@signed_in()
async def counters_json(page: Page) -> Response:
    totals, failure = await _read_counters(page)
    if totals is None:
        return JSONResponse({"error": {"message": failure}}, status_code=502)
    return JSONResponse(totals, headers={"Cache-Control": "no-store"})
