"""``helm test``: the release answers ``GET /readyz`` and ``POST /v1/check`` through its Service.

Runs in the test pod with the standard library only (the guardrail image's Python); tests/helm/test_helm.py runs
the same file against a live service. Environment: GUARDRAIL_URL (the Service's base URL), GUARDRAIL_WORDLISTS
(the release's default lists, comma-separated), GUARDRAIL_API_KEYS (optional: the first key is sent).
Exits 1 naming every failed check.
"""

import json
import os
import sys
import urllib.error
import urllib.request

BASE = os.environ["GUARDRAIL_URL"].rstrip("/")
KEYS = [key.strip() for key in os.environ.get("GUARDRAIL_API_KEYS", "").split(",") if key.strip()]
DEFAULT_LISTS = [name for name in os.environ["GUARDRAIL_WORDLISTS"].split(",") if name]
# A request term no word list holds: the check must find exactly it, wherever the lists change.
CANARY = "helm-test-canary"
TIMEOUT_S = 30


def call(method, path, body=None):
    headers = {"Content-Type": "application/json"}
    if KEYS:
        headers["Authorization"] = "Bearer " + KEYS[0]
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(BASE + path, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")


def main():
    failures = []
    status, body = call("GET", "/readyz")
    if status != 200 or not isinstance(body, dict) or body.get("status") != "ready":
        failures.append(f"GET /readyz: {status} {body}")
    text = f"a {CANARY} here"
    status, body = call("POST", "/v1/check", {"text": text, "banned_terms": [CANARY]})
    if status != 200 or not isinstance(body, dict):
        failures.append(f"POST /v1/check: {status} {body}")
    else:
        found = [(m["list"], m["start"], m["end"]) for m in body["matches"]]
        start = text.index(CANARY)
        if not body["flagged"] or found != [("request", start, start + len(CANARY))]:
            failures.append(f"POST /v1/check found {found}, expected the canary at {start}")
        lists = [entry["name"] for entry in body["wordlists"]]
        if sorted(lists) != sorted(DEFAULT_LISTS):
            failures.append(f"POST /v1/check scanned with {lists}, expected the default lists {DEFAULT_LISTS}")
    for failure in failures:
        print("FAIL", failure, file=sys.stderr)
    if failures:
        sys.exit(1)
    print(f"ok: {BASE} is ready and /v1/check flags a request term with the default lists {DEFAULT_LISTS}")


if __name__ == "__main__":
    main()
