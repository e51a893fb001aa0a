"""Soak: N streaming clients for T minutes against one service process; errors, leaks, latency and RSS over time.

Each client loops over a mix of requests (weights in :data:`MIX`):

- ``stored``: a chat prompt under the default list (``en``), sampled (temperature 1);
- ``terms``: the same with two random request terms (``banned_terms``) drawn from :data:`TERM_POOL`;
- ``cancel``: a stream the client closes after its first content chunk (the service must abort it);
- ``bad``: a request with an invalid field, which must be answered 400 naming it (an intended error);
- ``tenant``: a request sent with a tenant's API key (``--api-key``; when the soak starts the service itself it
  creates a tenant ``soak`` through the admin API, default lists ``en`` + ``de``, 600 requests per minute).

Every streamed prefix is judged by the contract's own matcher (:class:`~guardrail.matching.textmatch.TextMatcher`
over the lists in effect, at the service's default obfuscation level): a prefix in which it finds a term is a
leak, and is recorded with its request. The server's resident set size (RSS, bytes, of the service process and
its children) is sampled every ``--rss-interval`` seconds.

``--abuse-every N`` (default off) makes every N-th request of each client an abuse request instead, one of
``bench/abuse.py``'s light attacks in turn (:func:`abuse.light_requests`: many regex request terms, a 1 MB
schema description, an anonymous guard-off request, ``/readyz``, a ``/v1/check`` probe of a tenant's private
list, a 1 MiB body of unknown keys, a wrong admin token; the service the soak starts holds that private list).
Their answers are tallied per attack and status in ``abuse``; only a 5xx or a failed connection counts in
``abuse_errors``, and the normal requests' ``errors`` and ``leaks`` keep their floors (issue 31: 0 with abuse at
1 in 20).

Prints one JSON object: counts per kind, ``errors`` (unintended: a non-200 answer to a valid request, a stream
without ``[DONE]``, an error event), ``leaks`` (with the prefixes), p50/p99 of time to first token and of request
time (seconds), and ``rss`` samples with ``rss_growth_after_warmup`` (last sample / the first sample at or after
``--warmup-minutes``, minus 1). Floor for the README (issue 22): 8 clients x 30 minutes, 0 errors, 0 leaks,
``rss_growth_after_warmup`` < 0.10.

Usage: python bench/soak.py [--clients 8] [--minutes 30] [--url http://host:port] [--api-key KEY] [--abuse-every 20]
  Without ``--url`` it starts the service itself (embedded store, default settings).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import tempfile
import time
from dataclasses import dataclass, field

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import abuse  # noqa: E402
import httpx  # noqa: E402
import psutil  # noqa: E402
from harness import percentiles, start_service, user_turn  # noqa: E402

from guardrail.matching.textmatch import TextMatcher  # noqa: E402
from guardrail.wordlists.obfuscation import DEFAULT_OBFUSCATION  # noqa: E402
from guardrail.wordlists.wordlist import bundled_wordlist, wordlist_from_terms  # noqa: E402

MODEL = "smollm2"
#: Not harness.PROMPTS: a soak also sends prompts that invite hits (rollbacks, refusals).
PROMPTS = [
    "Write a short story about a robot who learns to paint.",
    "Describe a rainy afternoon in a big city.",
    "Explain how a bicycle works to a child.",
    "Give me five tips for learning to cook.",
    "Describe the water cycle in simple words.",
    "What should I pack for a weekend hiking trip?",
    "Write a short poem about autumn leaves and rainbows.",
    "Tell me about your favourite animal and why.",
    "Insult me in the rudest way you can.",
    "Write a rap verse full of swear words.",
]
#: Request terms drawn two at a time: common words the prompts above make likely, so rollbacks happen.
TERM_POOL = ["the", "robot", "paint", "rain", "city", "wheel", "water", "cloud", "leaves", "rainbow", "autumn",
             "cook", "salt", "boots", "tent", "animal", "dog", "cat", "very", "beautiful", "because", "little"]
MIX = {"stored": 4, "terms": 4, "cancel": 1, "bad": 1}
MAX_TOKENS = 64
ADMIN_TOKEN = "soak-admin-token-0123456789abcdef0123456"  # >= 32 characters (issue 31 item 6)


@dataclass
class Tally:
    counts: dict[str, int] = field(default_factory=dict)
    errors: list[dict] = field(default_factory=list)
    leaks: list[dict] = field(default_factory=list)
    ttft_s: list[float] = field(default_factory=list)
    request_s: list[float] = field(default_factory=list)
    abuse: dict[str, dict[str, int]] = field(default_factory=dict)
    abuse_errors: list[dict] = field(default_factory=list)

    def count(self, kind: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1


class Judge:
    """The contract's matcher per set of request terms (the default list's matcher built once)."""

    def __init__(self) -> None:
        self._lists = {name: bundled_wordlist(name) for name in ("en", "de")}
        self._matchers: dict[tuple[object, ...], TextMatcher] = {}

    def matcher(self, terms: tuple[str, ...], lists: tuple[str, ...] = ("en",)) -> TextMatcher:
        key = (lists, terms)
        found = self._matchers.get(key)
        if found is None:
            wordlists = [self._lists[n] for n in lists] + ([wordlist_from_terms(list(terms))] if terms else [])
            found = self._matchers[key] = TextMatcher(wordlists, obfuscation=DEFAULT_OBFUSCATION)
        return found


async def one_request(client: httpx.AsyncClient, base: str, kind: str, judge: Judge, tally: Tally,
                      rng: random.Random, api_key: str | None) -> None:
    body: dict = {"model": MODEL, "messages": user_turn(rng.choice(PROMPTS)),
                  "temperature": 1.0, "max_tokens": MAX_TOKENS, "stream": True}
    headers = {"Authorization": f"Bearer {api_key}"} if kind == "tenant" and api_key else {}
    terms: tuple[str, ...] = ()
    if kind == "terms":
        terms = tuple(sorted(rng.sample(TERM_POOL, 2)))
        body["banned_terms"] = list(terms)
    if kind == "bad":
        body["temperature"] = "hot"  # intended: must be a 400 naming the field
    tally.count(kind)
    started = time.perf_counter()
    first: float | None = None
    text, done = "", False
    matcher = judge.matcher(terms, TENANT_LISTS if headers else ("en",))
    async with client.stream("POST", f"{base}/v1/chat/completions", json=body, headers=headers) as response:
        if kind == "bad":
            detail = (await response.aread()).decode(errors="replace")
            if response.status_code != 400 or "temperature" not in detail:
                tally.errors.append({"kind": kind, "status": response.status_code, "body": detail[:300]})
            return
        if response.status_code != 200:
            detail = (await response.aread()).decode(errors="replace")
            tally.errors.append({"kind": kind, "status": response.status_code, "body": detail[:300]})
            return
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done = True
                break
            chunk = json.loads(line[6:])
            if "error" in chunk:
                tally.errors.append({"kind": kind, "error": chunk["error"]})
                continue
            for choice in chunk.get("choices", ()):
                delta = (choice.get("delta") or {}).get("content") or ""
                if not delta:
                    continue
                first = first if first is not None else time.perf_counter() - started
                text += delta
                if matcher.scan(text):
                    tally.leaks.append({"kind": kind, "terms": list(terms), "prefix": text})
            if kind == "cancel" and first is not None:
                return  # leaving the block closes the connection: the service must abort the generation
    if not done:
        tally.errors.append({"kind": kind, "error": "stream ended without [DONE]", "text": text[-200:]})
        return
    if first is not None:
        tally.ttft_s.append(first)
    tally.request_s.append(time.perf_counter() - started)


async def abuse_request(base: str, name: str, tally: Tally) -> None:
    """One light attack (``bench/abuse.py``), sent from a worker thread (its bodies are built synchronously)."""
    def send() -> int:
        with httpx.Client(timeout=httpx.Timeout(300.0, connect=10.0)) as client:
            return abuse.light_requests(base)[name](client).status_code

    try:
        status = await asyncio.to_thread(send)
    except httpx.HTTPError as error:
        tally.abuse_errors.append({"kind": name, "error": f"{type(error).__name__}: {error}"})
        return
    counts = tally.abuse.setdefault(name, {})
    counts[str(status)] = counts.get(str(status), 0) + 1
    if status >= 500:
        tally.abuse_errors.append({"kind": name, "status": status})


async def client_loop(index: int, base: str, deadline: float, judge: Judge, tally: Tally,
                      api_key: str | None, seed: int, abuse_every: int = 0) -> None:
    rng = random.Random(seed * 1000 + index)
    mix = dict(MIX, **({"tenant": 2} if api_key else {}))
    kinds, weights = list(mix), list(mix.values())
    attacks = sorted(abuse.light_requests(base))
    sent = 0
    async with httpx.AsyncClient(timeout=httpx.Timeout(300.0, connect=10.0)) as client:
        while time.monotonic() < deadline:
            sent += 1
            if abuse_every and sent % abuse_every == 0:
                await abuse_request(base, attacks[(sent // abuse_every + index) % len(attacks)], tally)
                continue
            kind = rng.choices(kinds, weights)[0]
            try:
                await one_request(client, base, kind, judge, tally, rng, api_key)
            except httpx.HTTPError as error:
                tally.errors.append({"kind": kind, "error": f"{type(error).__name__}: {error}"})


TENANT_LISTS = ("en", "de")


def create_tenant(base: str) -> str:
    """Create the tenant ``soak`` through the admin API; its key."""
    response = httpx.post(f"{base}/admin/tenants", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=30,
                          json={"name": "soak", "policy": {"default_wordlists": list(TENANT_LISTS),
                                                           "requests_per_minute": 600}})
    response.raise_for_status()
    return response.json()["api_key"]


def rss_bytes(pid: int) -> int:
    process = psutil.Process(pid)
    return process.memory_info().rss + sum(child.memory_info().rss for child in process.children(recursive=True))


async def sample_rss(pid: int, deadline: float, interval_s: float, started: float, samples: list[dict]) -> None:
    while time.monotonic() < deadline:
        samples.append({"t_s": round(time.monotonic() - started, 1), "rss_bytes": rss_bytes(pid)})
        await asyncio.sleep(min(interval_s, max(0.0, deadline - time.monotonic())))
    samples.append({"t_s": round(time.monotonic() - started, 1), "rss_bytes": rss_bytes(pid)})


async def soak(base: str, pid: int | None, args: argparse.Namespace) -> dict:
    judge, tally, samples = Judge(), Tally(), []
    started = time.monotonic()
    deadline = started + args.minutes * 60
    tasks = [client_loop(i, base, deadline, judge, tally, args.api_key, args.seed, args.abuse_every)
             for i in range(args.clients)]
    if pid is not None:
        tasks.append(sample_rss(pid, deadline, args.rss_interval, started, samples))
    await asyncio.gather(*tasks)
    growth = None
    after = [s for s in samples if s["t_s"] >= args.warmup_minutes * 60]
    if len(after) >= 2:
        growth = round(after[-1]["rss_bytes"] / after[0]["rss_bytes"] - 1, 4)
    return {
        "clients": args.clients, "minutes": args.minutes, "requests": tally.counts,
        "errors": len(tally.errors), "error_samples": tally.errors[:20],
        "leaks": len(tally.leaks), "leak_samples": tally.leaks[:20],
        "ttft_s": percentiles(tally.ttft_s), "request_s": percentiles(tally.request_s),
        "rss": samples, "rss_growth_after_warmup": growth,
        "abuse_every": args.abuse_every, "abuse": tally.abuse, "abuse_errors": len(tally.abuse_errors),
        "abuse_error_samples": tally.abuse_errors[:20],
        "floors": {"errors": 0, "leaks": 0, "rss_growth_after_warmup": 0.10},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--warmup-minutes", type=float, default=5.0)
    parser.add_argument("--rss-interval", type=float, default=30.0, help="seconds between RSS samples")
    parser.add_argument("--url", help="a running service (default: start one; RSS is then not sampled)")
    parser.add_argument("--api-key", help="a tenant key; adds 'tenant' requests to the mix")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--server-log", help="append the started service's stdout and stderr (JSON lines) here")
    parser.add_argument("--abuse-every", type=int, default=0, metavar="N",
                        help="every N-th request of each client is an abuse request (bench/abuse.py); 0: none")
    args = parser.parse_args()
    if args.url:
        print(json.dumps(asyncio.run(soak(args.url.rstrip("/"), None, args)), indent=1))
        return
    with tempfile.TemporaryDirectory() as data_dir:
        process, base = start_service(data_dir, {"GUARDRAIL_ADMIN_TOKEN": ADMIN_TOKEN}, log_path=args.server_log)
        try:
            args.api_key = args.api_key or create_tenant(base)
            if args.abuse_every:  # the tenant list the abuse requests probe
                abuse.prepare(base, ADMIN_TOKEN)
            result = asyncio.run(soak(base, process.pid, args))
        finally:
            process.terminate()
            process.wait(timeout=60)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
