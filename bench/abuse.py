"""Abuse: each attack of issue 31, replayed against the real service (uvicorn on a free port, a private
redis-server as the store), with normal chat streams running beside it.

For each attack it reports the answer (status codes, the error's ``param``/``code``), the time to answer
(seconds), the worst and p99 ``/healthz`` latency while it ran (polled every 20 ms; a poll that gets no answer
within ``--probe-deadline`` counts as that deadline and as a failure), and the normal streams' errors. Floors
(issue 31): the attacking request answered (4xx or 200) within its budget; ``/healthz`` p99 <= 0.1 s and worst
<= 0.5 s; streams with 0 errors; 12 distinct 4 MB-description schemas grow the server's RSS by <= 300 MB (or
are each refused with a 400).

Attacks (:data:`ATTACKS`): ``regex_terms`` (40 distinct ``re:bcd.{0,15}e...`` request terms),
``big_schemas`` (12 distinct schemas with a 4 MB ``description``), ``anonymous_guard_off``
(``wordlists: []``, ``obfuscation: off``, ``evasion_guard: off`` without a key), ``readyz_probe`` (what an
unauthenticated ``/readyz`` tells), ``check_scan`` (a dictionary scan of a tenant's private list through
``/v1/check``), ``unknown_keys`` (a 16 MiB body of unknown keys, then one at the body limit),
``exec_timeout`` (admin writes while Redis holds writes back: ``CLIENT PAUSE ... WRITE`` longer than the
store's timeout, so that ``EXEC`` replies time out), ``admin_bruteforce`` (wrong admin tokens; last, as it leaves
the address throttled).

The light variants (:data:`LIGHT`) are what ``bench/soak.py --abuse-every N`` mixes into a soak.

Usage: python bench/abuse.py [--only regex_terms,big_schemas] [--streams 2] [--out abuse.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import httpx  # noqa: E402
import numpy as np  # noqa: E402
import psutil  # noqa: E402
import redis  # noqa: E402
from harness import free_port, start_service, user_turn  # noqa: E402

from guardrail.matching.obfuscation import DEFAULT_OBFUSCATION  # noqa: E402

MODEL = "smollm2"
MAX_BODY_BYTES = 4 * 1024 * 1024  # the service's default GUARDRAIL_MAX_BODY_BYTES
#: 40 characters: long enough for an admin token floor of 32 (issue 31 item 6).
ADMIN_TOKEN = "abuse-bench-admin-token-0123456789abcdef"
TENANT = "victim"
SECRET_LIST = "victim-private"
SECRET_TERMS = ["zanzibar", "quokka", "marzipan"]
#: A dictionary an attacker scans a list with; the secret terms are among its words.
DICTIONARY = ["apple", "river", "stone", "cloud", "garden", "window", "yellow", "silver", "marzipan", "forest",
              "quokka", "engine", "pillow", "candle", "zanzibar", "harbor", "violet", "meadow", "anchor", "copper"]
CHAT = "/v1/chat/completions"


@dataclass
class Context:
    """What an attack needs: the service, its admin token, its process (RSS, log) and its Redis."""

    base: str
    pid: int
    redis_url: str
    log_path: str | None = None
    tenant_key: str | None = None
    rng: random.Random = field(default_factory=lambda: random.Random(31))

    def admin_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def error_of(response: httpx.Response) -> dict[str, Any]:
    """``{"param", "code"}`` of an error answer (empty for a success or a body that is not an error)."""
    try:
        error = response.json().get("error") or {}
    except (ValueError, AttributeError):
        return {}
    return {"param": error.get("param"), "code": error.get("code")}


def answer(response: httpx.Response, started: float) -> dict[str, Any]:
    return {"status": response.status_code, **error_of(response), "seconds": round(time.perf_counter() - started, 3)}


def rss_bytes(pid: int) -> int:
    process = psutil.Process(pid)
    return process.memory_info().rss + sum(child.memory_info().rss for child in process.children(recursive=True))


# -- the attacks ----------------------------------------------------------------------------------
def regex_terms_body(count: int = 40) -> dict[str, Any]:
    """A chat request with ``count`` distinct regex request terms whose union passes the automaton's state limit."""
    terms = [f"re:bcd.{{0,15}}e{chr(97 + i // 26)}{chr(97 + i % 26)}" for i in range(count)]
    return {"model": MODEL, "messages": user_turn("Hi"), "max_tokens": 4, "banned_terms": terms}


def regex_terms(ctx: Context, client: httpx.Client) -> dict[str, Any]:
    started = time.perf_counter()
    return answer(client.post(f"{ctx.base}{CHAT}", json=regex_terms_body()), started)


def schema_body(index: int, description_bytes: int = 4 * 1024 * 1024) -> dict[str, Any]:
    """A chat request whose ``json_schema`` carries a ``description`` of ``description_bytes`` (distinct per index)."""
    schema = {"type": "object", "description": f"{index}:" + "x" * description_bytes,
              "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    return {"model": MODEL, "messages": user_turn("Answer in JSON."), "max_tokens": 4,
            "response_format": {"type": "json_schema", "json_schema": {"name": f"s{index}", "schema": schema}}}


def big_schemas(ctx: Context, client: httpx.Client, count: int = 12) -> dict[str, Any]:
    before = rss_bytes(ctx.pid)
    statuses: Counter[int] = Counter()
    params: Counter[str] = Counter()
    started = time.perf_counter()
    for index in range(count):
        response = client.post(f"{ctx.base}{CHAT}", json=schema_body(index))
        statuses[response.status_code] += 1
        params[str(error_of(response).get("param"))] += 1
    growth = rss_bytes(ctx.pid) - before
    return {"statuses": dict(statuses), "params": dict(params), "seconds": round(time.perf_counter() - started, 3),
            "rss_growth_bytes": growth, "rss_growth_mb": round(growth / 1e6, 1), "floor_rss_growth_mb": 300}


def guard_off_body() -> dict[str, Any]:
    return {"model": MODEL, "messages": user_turn("Say something rude."), "max_tokens": 4,
            "wordlists": [], "obfuscation": "off", "evasion_guard": "off"}


def anonymous_guard_off(ctx: Context, client: httpx.Client) -> dict[str, Any]:
    started = time.perf_counter()
    response = client.post(f"{ctx.base}{CHAT}", json=guard_off_body())
    return {**answer(response, started), "guard_switched_off": response.status_code == 200}


def readyz_probe(ctx: Context, client: httpx.Client, count: int = 50) -> dict[str, Any]:
    started = time.perf_counter()
    statuses: Counter[int] = Counter()
    body = ""
    for _ in range(count):
        response = client.get(f"{ctx.base}/readyz")
        statuses[response.status_code] += 1
        body = response.text
    names_shown = [name for name in ("en", "de", SECRET_LIST) if f'"{name}"' in body]
    return {"statuses": dict(statuses), "seconds": round(time.perf_counter() - started, 3),
            "body_bytes": len(body), "list_names_shown": names_shown}


def check_scan(ctx: Context, client: httpx.Client) -> dict[str, Any]:
    """An anonymous caller scans a dictionary against a tenant's private list: how many terms it reads out."""
    started = time.perf_counter()
    statuses: Counter[int] = Counter()
    revealed: list[str] = []
    for word in DICTIONARY:
        response = client.post(f"{ctx.base}/v1/check", json={"text": word, "wordlists": [SECRET_LIST]})
        statuses[response.status_code] += 1
        if response.status_code == 200:
            revealed += [m["term"] for m in response.json()["matches"] if m.get("term")]
    return {"statuses": dict(statuses), "seconds": round(time.perf_counter() - started, 3),
            "terms_revealed": len(revealed), "secret_terms": len(SECRET_TERMS)}


def unknown_keys_body(size_bytes: int = 16 * 1024 * 1024) -> bytes:
    """A chat body padded with unknown keys (``"k0000001": 0``) to ``size_bytes``."""
    head = json.dumps({"model": MODEL, "messages": user_turn("Hi"), "max_tokens": 4})[:-1]
    per_key = len(', "k0000000": 0')
    keys = ", ".join(f'"k{i:07d}": 0' for i in range(max(1, (size_bytes - len(head)) // per_key)))
    return f"{head}, {keys}}}".encode()


def log_size(ctx: Context) -> int:
    return os.path.getsize(ctx.log_path) if ctx.log_path and os.path.exists(ctx.log_path) else 0


def longest_log_line(ctx: Context, since: int) -> int:
    if not ctx.log_path:
        return 0
    with open(ctx.log_path, "rb") as handle:
        handle.seek(since)
        return max((len(line) for line in handle), default=0)


def unknown_keys(ctx: Context, client: httpx.Client) -> dict[str, Any]:
    """A 16 MiB body of unknown keys (the issue's), then one just under the service's body limit
    (``GUARDRAIL_MAX_BODY_BYTES``, 4 MiB by default): the answer is the latter's, ``oversized_status`` the
    former's."""
    headers = {"Content-Type": "application/json"}
    oversized = client.post(f"{ctx.base}{CHAT}", content=unknown_keys_body(), headers=headers)
    body = unknown_keys_body(MAX_BODY_BYTES - 1024)
    before = log_size(ctx)
    started = time.perf_counter()
    response = client.post(f"{ctx.base}{CHAT}", content=body, headers=headers)
    result = answer(response, started)
    return {**result, "body_bytes": len(body), "oversized_status": oversized.status_code,
            "log_bytes_written": log_size(ctx) - before, "longest_log_line_bytes": longest_log_line(ctx, before)}


def admin_bruteforce(ctx: Context, client: httpx.Client, count: int = 300) -> dict[str, Any]:
    statuses: Counter[int] = Counter()
    started = time.perf_counter()
    for _ in range(count):
        token = "".join(ctx.rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(40))
        statuses[client.get(f"{ctx.base}/admin/wordlists", headers={"Authorization": f"Bearer {token}"})
                 .status_code] += 1
    return {"statuses": dict(statuses), "seconds": round(time.perf_counter() - started, 3),
            "throttled": statuses.get(429, 0)}


def exec_timeout(ctx: Context, client: httpx.Client, writes: int = 8, pause_ms: int = 1500) -> dict[str, Any]:
    """Admin writes while Redis holds writes back longer than the store's timeout; every 200 must be readable
    back, and no answer may say "nothing was changed" for a change that committed."""
    hold = redis.Redis.from_url(ctx.redis_url, socket_timeout=5)
    outcomes: Counter[str] = Counter()
    lost, started = 0, time.perf_counter()
    for index in range(writes):
        name = f"abuse-exec-{index % 2}"
        terms = [f"term{index}-{ctx.rng.randrange(10**6)}"]
        hold.execute_command("CLIENT", "PAUSE", str(pause_ms), "WRITE")
        response = client.put(f"{ctx.base}/admin/wordlists/{name}", json={"terms": terms},
                              headers=ctx.admin_headers())
        outcomes[f"{response.status_code} {error_of(response).get('code') or ''}".strip()] += 1
        hold.execute_command("CLIENT", "UNPAUSE")
        if response.status_code in (200, 201):
            read = client.get(f"{ctx.base}/admin/wordlists/{name}", headers=ctx.admin_headers())
            if read.headers.get("ETag") != response.headers.get("ETag"):
                lost += 1
    return {"outcomes": dict(outcomes), "seconds": round(time.perf_counter() - started, 3),
            "acknowledged_lost": lost}


ATTACKS: dict[str, Callable[[Context, httpx.Client], dict[str, Any]]] = {
    "regex_terms": regex_terms, "big_schemas": big_schemas, "anonymous_guard_off": anonymous_guard_off,
    "readyz_probe": readyz_probe, "check_scan": check_scan, "unknown_keys": unknown_keys,
    # Last: a throttled address is refused even with the right token until the window passes (service/auth.py).
    "exec_timeout": exec_timeout, "admin_bruteforce": admin_bruteforce,
}


def light_requests(base: str) -> dict[str, Callable[[httpx.Client], httpx.Response]]:
    """One request of each attack, light enough to mix into a soak (``bench/soak.py --abuse-every``)."""
    return {
        "regex_terms": lambda c: c.post(f"{base}{CHAT}", json=regex_terms_body()),
        "big_schema": lambda c: c.post(f"{base}{CHAT}", json=schema_body(random.randrange(10**9), 1024 * 1024)),
        "anonymous_guard_off": lambda c: c.post(f"{base}{CHAT}", json=guard_off_body()),
        "readyz": lambda c: c.get(f"{base}/readyz"),
        "check_scan": lambda c: c.post(f"{base}/v1/check", json={"text": random.choice(DICTIONARY),
                                                                   "wordlists": [SECRET_LIST]}),
        "unknown_keys": lambda c: c.post(f"{base}{CHAT}", content=unknown_keys_body(1024 * 1024),
                                         headers={"Content-Type": "application/json"}),
        "admin_wrong_token": lambda c: c.get(f"{base}/admin/wordlists",
                                             headers={"Authorization": f"Bearer wrong-{random.random()}"}),
    }


# -- what runs beside an attack -------------------------------------------------------------------
class Probe(threading.Thread):
    """``GET /healthz`` every ``interval_s`` until stopped; latencies in seconds (a poll unanswered within
    ``deadline_s`` counts as ``deadline_s`` and as a failure)."""

    def __init__(self, base: str, deadline_s: float, interval_s: float = 0.02) -> None:
        super().__init__(daemon=True)
        self.base, self.deadline_s, self.interval_s = base, deadline_s, interval_s
        self.latencies: list[float] = []
        self.failures = 0
        self.halt = threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=self.deadline_s) as client:
            while not self.halt.is_set():
                started = time.perf_counter()
                try:
                    ok = client.get(f"{self.base}/healthz").status_code == 200
                except httpx.HTTPError:
                    ok = False
                self.latencies.append(min(time.perf_counter() - started, self.deadline_s))
                self.failures += not ok
                self.halt.wait(self.interval_s)

    def summary(self) -> dict[str, Any]:
        values = self.latencies or [0.0]
        return {"polls": len(self.latencies), "failures": self.failures,
                "worst_s": round(max(values), 3), "p99_s": round(float(np.percentile(values, 99)), 3),
                "floor_p99_s": 0.1, "floor_worst_s": 0.5}


class Streams:
    """``count`` normal chat streams, each repeated until stopped (at least once); errors are any non-200, an
    error event or a stream without ``[DONE]``."""

    def __init__(self, base: str, count: int, max_tokens: int = 16) -> None:
        self.base, self.max_tokens = base, max_tokens
        self.done = self.errors = 0
        self.samples: list[str] = []
        self.halt = threading.Event()
        self._lock = threading.Lock()
        self.threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(count)]

    def _one(self, client: httpx.Client) -> str | None:
        body = {"model": MODEL, "messages": user_turn("Describe a sunny day at the beach."), "stream": True,
                "max_tokens": self.max_tokens}
        with client.stream("POST", f"{self.base}{CHAT}", json=body) as response:
            if response.status_code != 200:
                return f"status {response.status_code}: {response.read()[:200]!r}"
            for line in response.iter_lines():
                if line == "data: [DONE]":
                    return None
                if line.startswith("data: ") and '"error"' in line[:20]:
                    return line[:200]
        return "stream ended without [DONE]"

    def _loop(self) -> None:
        with httpx.Client(timeout=httpx.Timeout(300.0, connect=10.0)) as client:
            while True:
                try:
                    error = self._one(client)
                except httpx.HTTPError as exc:
                    error = f"{type(exc).__name__}: {exc}"
                with self._lock:
                    self.done += 1
                    if error is not None:
                        self.errors += 1
                        self.samples.append(error)
                if self.halt.is_set():
                    return

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def stop(self) -> dict[str, Any]:
        self.halt.set()
        for thread in self.threads:
            thread.join(timeout=600)
        return {"streams": len(self.threads), "requests": self.done, "errors": self.errors,
                "error_samples": self.samples[:5]}


def under_attack(ctx: Context, attack: Callable[[Context, httpx.Client], dict[str, Any]], streams: int = 2,
                 probe_deadline_s: float = 2.0, timeout_s: float = 600.0) -> dict[str, Any]:
    """Run ``attack`` with ``streams`` normal streams and the ``/healthz`` probe beside it."""
    probe, normal = Probe(ctx.base, probe_deadline_s), Streams(ctx.base, streams)
    probe.start()
    normal.start()
    try:
        with httpx.Client(timeout=timeout_s) as client:
            result = attack(ctx, client)
    finally:
        stream_summary = normal.stop()
        probe.halt.set()
        probe.join(timeout=30)
    return {"answer": result, "healthz": probe.summary(), "normal_streams": stream_summary}


# -- the service and its Redis --------------------------------------------------------------------
class PrivateRedis:
    """A redis-server of our own on a free port (an append-only file synced before each reply), so that its
    writes can be held back without touching anyone else's."""

    def __init__(self, directory: str) -> None:
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process = subprocess.Popen([binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                         "--appendonly", "yes", "--appendfsync", "always", "--dir", directory],
                                        stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis.from_url(self.url, socket_timeout=1).ping()
                return
            except redis.RedisError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=10)


def prepare(base: str, admin_token: str = ADMIN_TOKEN) -> str:
    """A tenant owning a private list of :data:`SECRET_TERMS` (the ``check_scan`` target); the tenant's key."""
    headers = {"Authorization": f"Bearer {admin_token}"}
    created = httpx.post(f"{base}/admin/tenants", headers=headers, timeout=30,
                         json={"name": TENANT, "policy": {"own_wordlists": [SECRET_LIST]}})
    created.raise_for_status()
    key = created.json()["api_key"]
    httpx.put(f"{base}/admin/wordlists/{SECRET_LIST}", headers={"Authorization": f"Bearer {key}"}, timeout=30,
              json={"terms": SECRET_TERMS}).raise_for_status()
    return key


def service_settings(redis_url: str) -> dict[str, str]:
    """The service's defaults (anonymous callers allowed, request terms allowed) with a Redis store and the admin
    API on, and the floors a public deployment sets for anonymous callers (docs/service.md, "Anonymous callers"):
    the ``en`` list always, the default obfuscation level at least, the evasion guard not to be switched off."""
    return {"GUARDRAIL_REDIS_URL": redis_url, "GUARDRAIL_REDIS_PREFIX": "abuse:", "GUARDRAIL_ADMIN_TOKEN": ADMIN_TOKEN,
            "GUARDRAIL_LOG_LEVEL": "INFO", "GUARDRAIL_ANONYMOUS_REQUIRED_WORDLISTS": "en",
            "GUARDRAIL_ANONYMOUS_MIN_OBFUSCATION": str(DEFAULT_OBFUSCATION),
            "GUARDRAIL_ANONYMOUS_EVASION_GUARD_OFF": "false"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", help="comma-separated attack names (default: all)")
    parser.add_argument("--streams", type=int, default=2, help="normal chat streams beside each attack")
    parser.add_argument("--probe-deadline", type=float, default=2.0, help="seconds a /healthz poll may take")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()
    names = args.only.split(",") if args.only else list(ATTACKS)
    with tempfile.TemporaryDirectory() as tmp:
        store = PrivateRedis(tmp)
        log_path = os.path.join(tmp, "service.log")
        process, base = start_service(os.path.join(tmp, "data"), service_settings(store.url), log_path=log_path)
        try:
            ctx = Context(base, process.pid, store.url, log_path)
            ctx.tenant_key = prepare(base)
            idle = Probe(base, args.probe_deadline)
            idle.start()
            time.sleep(2.0)  # a baseline of the probe alone, same run
            idle.halt.set()
            idle.join()
            results: dict[str, Any] = {"baseline_healthz": idle.summary(), "rss_start_bytes": rss_bytes(process.pid)}
            for name in names:
                results[name] = under_attack(ctx, ATTACKS[name], args.streams, args.probe_deadline)
                print(json.dumps({name: results[name]}), flush=True)
        finally:
            process.terminate()
            process.wait(timeout=60)
            store.stop()
    text = json.dumps(results, indent=1)
    if args.out:
        with open(args.out, "w") as handle:
            handle.write(text)
    print(text)


if __name__ == "__main__":
    main()
