"""Request compiles and schema sizes against the running service (issue 31, items 1 and 2): what each attack is
answered, how long it takes, and the worst ``/healthz`` latency while it runs. Prints one JSON object.

The service runs as its own process at its defaults (anonymous callers, request terms allowed), the embedded
store. A prober process sends ``GET /healthz`` back to back (each with its own 2 s timeout) during each phase:

* ``idle``: no attack (the baseline of the same run);
* ``forty_terms``: one chat with 40 distinct regex terms like ``re:bcd.{0,15}e`` (each compiles alone, together
  they are over the automaton limit): its status, time to answer, error ``param`` and ``code``;
* ``forty_terms_again``: the same request again (answered from the refusal memory);
* ``pool_flood``: ``--flood`` such requests at once, each with distinct terms (the pool's threads, then its
  wait, then 503 ``compile_busy``): statuses and the slowest answer;
* ``check_flood``: the same through ``POST /v1/check`` (no prompt to tokenize: the compile pool alone);
* ``schemas``: 12 chats, each with a distinct schema padded with a 4 MB ``description``: statuses and the
  server's RSS growth (``/proc/<pid>/status`` ``VmRSS``) from before the first to after the last.

Floors (issue 31): every attack answered (4xx or 200) within its budget; ``/healthz`` p99 ≤ 100 ms and worst
≤ 0.5 s during each; RSS growth ≤ 300 MB for the 12 schemas (or each refused with a 400).

Run::

    HF_HUB_OFFLINE=1 .venv/bin/python bench/compile_budget.py [--flood 40]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import percentiles, start_service, user_turn  # noqa: E402

LETTERS = "abcdefghijklmnopqrstuvwxyz"


def overlapping(salt: str) -> list[str]:
    return [f"re:{salt}{LETTERS[i % 26]}{LETTERS[(i + 1) % 26]}{LETTERS[(i + 2) % 26]}.{{0,{15 - i // 26}}}"
            f"{LETTERS[(i + 3) % 26]}" for i in range(40)]


def _probe(base: str, stop, out) -> None:
    latencies = []
    with httpx.Client(timeout=2.0) as client:
        while not stop.is_set():
            started = time.perf_counter()
            try:
                client.get(f"{base}/healthz")
                latencies.append(time.perf_counter() - started)
            except httpx.HTTPError:
                latencies.append(2.0)
            time.sleep(0.005)
    out.send(latencies)


class Prober:
    """``GET /healthz`` back to back from a process of its own (the attack's client threads would otherwise
    delay the probe in this process), latencies in seconds (a timeout counts 2 s)."""

    def __init__(self, base: str):
        self.latencies: list[float] = []
        self._stop = multiprocessing.Event()
        self._receive, send = multiprocessing.Pipe(duplex=False)
        self._process = multiprocessing.Process(target=_probe, args=(base, self._stop, send), daemon=True)

    def __enter__(self) -> Prober:
        self._process.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self.latencies = self._receive.recv()
        self._process.join()

    def report(self) -> dict:
        return {"probes": len(self.latencies), **(percentiles([x * 1000 for x in self.latencies], 1) or {}),
                "worst_ms": round(max(self.latencies, default=0) * 1000, 1)}


def chat(base: str, **extra) -> dict:
    started = time.perf_counter()
    response = httpx.post(f"{base}/v1/chat/completions", timeout=300, json={
        "model": "smollm2", "messages": user_turn("Say hi."), "max_tokens": 4, **extra})
    error = response.json().get("error") if response.status_code >= 400 else None
    return {"status": response.status_code, "seconds": round(time.perf_counter() - started, 3),
            "param": error and error.get("param"), "code": error and error.get("code")}


def check(base: str, **extra) -> dict:
    started = time.perf_counter()
    response = httpx.post(f"{base}/v1/check", timeout=300, json={"text": "hello", **extra})
    return {"status": response.status_code, "seconds": round(time.perf_counter() - started, 3)}


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--flood", type=int, default=40, help="concurrent distinct 40-term requests")
    args = parser.parse_args()
    result: dict = {}
    with tempfile.TemporaryDirectory() as data_dir:
        process, base = start_service(data_dir)
        try:
            with Prober(base) as probe:
                time.sleep(2)
            result["idle"] = {"healthz": probe.report()}
            terms = overlapping("x")
            for phase in ("forty_terms", "forty_terms_again"):
                with Prober(base) as probe:
                    answer = chat(base, banned_terms=terms)
                result[phase] = {**answer, "healthz": probe.report()}
            with Prober(base) as probe, ThreadPoolExecutor(args.flood) as pool:
                answers = list(pool.map(lambda i: chat(base, banned_terms=overlapping(f"f{i}")), range(args.flood)))
            statuses: dict[str, int] = {}
            for answer in answers:
                statuses[str(answer["status"])] = statuses.get(str(answer["status"]), 0) + 1
            result["pool_flood"] = {"requests": args.flood, "statuses": statuses,
                                    "slowest_s": max(a["seconds"] for a in answers), "healthz": probe.report()}
            with Prober(base) as probe, ThreadPoolExecutor(args.flood) as pool:
                answers = list(pool.map(lambda i: check(base, banned_terms=overlapping(f"c{i}")), range(args.flood)))
            statuses = {}
            for answer in answers:
                statuses[str(answer["status"])] = statuses.get(str(answer["status"]), 0) + 1
            result["check_flood"] = {"requests": args.flood, "statuses": statuses,
                                     "slowest_s": max(a["seconds"] for a in answers), "healthz": probe.report()}
            before = rss_mb(process.pid)
            with Prober(base) as probe:
                answers = []
                for i in range(12):
                    schema = {"type": "object", "description": f"{i}" + "x" * (4 * 1024 * 1024),
                              "properties": {"a": {"type": "string"}}}
                    answers.append(chat(base, response_format={"type": "json_schema", "json_schema": {
                        "name": f"s{i}", "schema": schema}}))
            result["schemas"] = {"statuses": sorted({a["status"] for a in answers}),
                                 "codes": sorted({str(a["code"]) for a in answers}),
                                 "slowest_s": max(a["seconds"] for a in answers),
                                 "rss_growth_mb": round(rss_mb(process.pid) - before, 1), "healthz": probe.report()}
        finally:
            process.terminate()
            process.wait(timeout=60)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
