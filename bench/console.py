"""Console benchmark: how fast the admin console's pages load in a real browser, and how soon the live view shows
the first kept text, each against the API calls underneath measured in the same run.

Prints one JSON object. Floors (issue 32): every page loads in <= 300 ms (``pages.<page>.load_ms_p50``: the
browser's navigation start to its load event, Navigation Timing, median of ``--loads`` loads after one warm-up);
the live view shows the first kept text <= 100 ms after the API stream delivers it (``live.overhead_ms_p50``:
per pair of runs, the console's time from its request to the first kept text in the page's DOM, minus the API's
time from its request to its first content chunk read by a plain HTTP client, the two runs of a pair back to back
on the same prompt, greedy, so the same generation; the median over ``--streams`` pairs).

Baselines, same run: each page's API calls made directly by an HTTP client (``api_ms_p50``: what the page waits
for), and the API's own time to first content chunk (``live.api_first_text_ms_p50``).

The service runs as its own process (uvicorn, embedded store, default list ``en``, admin token set); the browser
is Debian's Chromium driven by Playwright (as the console's tests).

Usage: python bench/console.py [--loads 10] [--streams 8]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import httpx  # noqa: E402
from harness import ROOT, percentiles, start_service, user_turn  # noqa: E402

sys.path.insert(0, str(ROOT / "tests"))
from helpers.browser import CHROMIUM, LAUNCH_ARGS  # noqa: E402

ADMIN = "bench-console-admin-token-0123456789abcdef"
PAGE_FLOOR_MS = 300.0
LIVE_FLOOR_MS = 100.0
PROMPT = "What is the capital of France?"
TERMS = ["Paris"]
MAX_TOKENS = 24


def pages() -> dict[str, tuple[str, list[tuple[str, str, dict | None]]]]:
    """Each page measured: its path, and the API calls it makes (method, path, JSON body)."""
    return {
        "word lists": ("/console/lists", [("GET", "/admin/wordlists", None)]),
        "word list en": ("/console/lists/en", [("GET", "/admin/wordlists/en", None),
                                               ("GET", "/admin/audit?limit=200", None)]),
        "versions": ("/console/lists/en/versions", [("GET", "/admin/wordlists/en/versions", None)]),
        "check": ("/console/check", [("GET", "/admin/wordlists", None)]),
        "live view": ("/console/live", [("GET", "/admin/wordlists", None), ("GET", "/v1/models", None)]),
        "operations": ("/console/ops", [("GET", "/readyz", None), ("GET", "/v1/models", None),
                                        ("GET", "/admin/wordlists", None), ("GET", "/metrics", None)]),
        "tenants": ("/console/tenants", [("GET", "/admin/tenants", None)]),
        "audit": ("/console/audit", [("GET", "/admin/audit?limit=200", None),
                                     ("GET", "/admin/audit/tenants?limit=200", None)]),
    }


def api_ms(client: httpx.Client, calls: list[tuple[str, str, dict | None]]) -> float:
    started = time.perf_counter()
    for method, path, body in calls:
        client.request(method, path, json=body).raise_for_status()
    return (time.perf_counter() - started) * 1000


def load_ms(page, url: str) -> float:
    page.goto(url)
    return page.evaluate("""() => { const n = performance.getEntriesByType('navigation')[0];
                                     return n.loadEventEnd - n.startTime; }""")


def api_first_text_ms(client: httpx.Client, model: str) -> float:
    """A plain client's time from sending the chat request to reading its first content chunk."""
    body = {"model": model, "messages": user_turn(PROMPT), "stream": True, "temperature": 0,
            "max_tokens": MAX_TOKENS, "banned_terms": TERMS,
            "stream_options": {"include_guard_events": True, "include_usage": True}}
    started = time.perf_counter()
    first = None
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if first is None and line.startswith("data: {") and '"content":"' in line and '"content":""' not in line:
                first = (time.perf_counter() - started) * 1000
    assert first is not None, "no content streamed"
    return first


def console_first_text_ms(page) -> float:
    """The live view's time from its request to the first kept text in its DOM (the page measures it)."""
    page.get_by_role("button", name="Send").click()
    page.wait_for_selector("#live-answer[data-finish-reason]", timeout=300_000)
    return float(page.get_attribute("#live-answer", "data-first-text-ms"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loads", type=int, default=10, help="loads of each page measured (after one warm-up)")
    parser.add_argument("--streams", type=int, default=8, help="pairs of live-view and API streams")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    data = tempfile.mkdtemp(prefix="bench-console-")
    process, base = start_service(data, {"GUARDRAIL_ADMIN_TOKEN": ADMIN})
    try:
        client = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=300)
        model = client.get("/v1/models").json()["data"][0]["id"]
        client.post("/admin/tenants", json={"name": "bench", "policy": {}}).raise_for_status()
        results: dict[str, dict] = {}
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.goto(f"{base}/console/sign-in")
            page.get_by_label("Admin token or tenant key").fill(ADMIN)
            page.get_by_role("button", name="Sign in").click()
            page.wait_for_url("**/console/lists")
            for name, (path, calls) in pages().items():
                load_ms(page, base + path)  # warm-up (first compiles, caches)
                api_ms(client, calls)
                loads, direct = [], []
                for _ in range(args.loads):
                    direct.append(api_ms(client, calls))
                    loads.append(load_ms(page, base + path))
                results[name] = {"load_ms": percentiles(loads, 1), "api_ms": percentiles(direct, 1),
                                 "load_ms_p50": round(statistics.median(loads), 1),
                                 "api_ms_p50": round(statistics.median(direct), 1)}
            page.goto(f"{base}/console/live")
            page.get_by_label("Request terms, one per line (banned_terms)").fill("\n".join(TERMS))
            page.get_by_label("Max tokens").fill(str(MAX_TOKENS))
            api_first_text_ms(client, model)  # warm-up: the prompt's prefix is cached for both sides
            console_first_text_ms(page)
            pairs = []
            for _ in range(args.streams):
                pairs.append((api_first_text_ms(client, model), console_first_text_ms(page)))
            browser.close()
    finally:
        process.terminate()
        process.wait(timeout=60)
        shutil.rmtree(data, ignore_errors=True)
    overheads = [console - api for api, console in pairs]
    slowest_page = max(r["load_ms_p50"] for r in results.values())
    live = {"api_first_text_ms_p50": round(statistics.median(a for a, _ in pairs), 1),
            "console_first_text_ms_p50": round(statistics.median(c for _, c in pairs), 1),
            "overhead_ms_p50": round(statistics.median(overheads), 1),
            "overhead_ms_max": round(max(overheads), 1), "pairs": len(pairs)}
    print(json.dumps({
        "pages": results, "slowest_page_load_ms_p50": slowest_page, "page_floor_ms": PAGE_FLOOR_MS,
        "live": live, "live_floor_ms": LIVE_FLOOR_MS,
        "floors_met": {"pages": slowest_page <= PAGE_FLOOR_MS, "live": live["overhead_ms_p50"] <= LIVE_FLOOR_MS},
        "loads": args.loads, "browser": CHROMIUM,
    }, indent=1))


if __name__ == "__main__":
    main()
