"""Gateway benchmark: the same prompts straight to vLLM's OpenAI server and through ``guardrail serve --engine
remote`` in front of it, banning either way the gateway can (docs/engines.md): ``logit_bias`` with a one-token
re-pick (any vLLM server; ``GUARDRAIL_UPSTREAM_LOGITS_PROCESSOR=off``) and guardrail's vLLM logits processor
(exact masks, a rollback in one request; ``=on``, which needs guardrail installed beside the server).

Prints one JSON object; every number comes with its baseline measured in the same run (the machine is shared
and noisy: compare ratios):

* ``throughput``: aggregate completion tokens/s of 1 and of 8 concurrent streams, direct (``/v1/completions``
  with the chat-templated token ids) vs through each gateway (``/v1/chat/completions``, the default ``en`` list,
  prompts that hit nothing), ``ignore_eos`` so all decode the same number of tokens. Floor: gateway ≥ 0.9 ×
  direct. Runs alternate (order rotated every rep), ``--reps`` times; medians.
* ``ttft_added_s``: median time to the first text chunk through the gateway without lists minus direct, single
  requests alternating (``--ttft-samples`` each; template rendering, one more HTTP hop, the guard session's
  bookkeeping). Floor: ≤ 0.020 s.
  ``ttft_s.gateway_guarded``: the same with the ``en`` list, whose hold-back keeps text until no term can
  still begin in it (a word's end, as on every engine): that wait is the guarantee, not overhead.
* ``rollback``: per upstream (prefix caching on, and off when the benchmark starts the servers itself), per
  context length (``--contexts``: a system message of filler text brings the prompt to that many tokens), per
  ban mode: ``--leaks`` leak-suite prompts (tests/data/leak_prompts.json), greedy, ``ignore_eos``, each once
  with its term banned and once without (the baseline: same tokens decoded, no rollback). Reported: rollbacks,
  upstream requests per rollback (the gateway's ``guardrail_upstream_requests_total``), seconds per rollback
  ((guarded − baseline) ÷ rollbacks), and the prompt tokens the guarded answers' requests (the first, then the
  resubmissions) asked the upstream for and how many of them its prefix cache served (vLLM's
  ``vllm:prefix_cache_queries`` / ``_hits``).

The upstream is either a vLLM OpenAI server that already runs (``--upstream URL``: its prefix-caching setting is
whatever it was started with, reported as ``"given"``), or started here from ``--vllm-python`` (the vLLM
environment's python, e.g. ``.venv-vllm/bin/python``) twice, with prefix caching on then off, as docs/engines.md
starts it (float32, eager, block size 32). Gateways run as subprocesses of this environment (tokenizer only).

``--split-cpus`` models the deployment the gateway is for — the guard on its own pods, the model on its
server — on one machine: vLLM's server is pinned to the first half of the CPUs, the gateways and this client
to the rest (``taskset``), so the gateway's work does not slow the model down; direct requests come from the
same pinned client. Without it every process shares every CPU, and the gateway's own CPU time (JSON, SSE, the
guard) is taken from the model's.

Usage:
    .venv/bin/python bench/gateway.py --vllm-python .venv-vllm/bin/python --split-cpus [--tokens 32] [--reps 3]
    .venv/bin/python bench/gateway.py --upstream http://127.0.0.1:8001
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parent.parent

from harness import free_port  # noqa: E402

from guardrail.models import load_tokenizer, model_directory  # noqa: E402
from guardrail.prompts import prompt_ids  # noqa: E402

PROMPTS = ["Name three fruits.", "Count from one to five.", "What is two plus two?",
           "Describe a cat in one sentence.", "Name a large ocean.", "What is the color of grass?",
           "List three musical instruments.", "What do bees make?"]
LEAKS = json.loads((ROOT / "tests" / "data" / "leak_prompts.json").read_text("utf-8"))
#: Filler for the long-context rollbacks: neutral prose, repeated to the length asked for.
FILLER = ("The library opens at nine and closes at six. Its reading room has tall windows, long oak tables and "
          "a quiet corner for maps. Visitors sign the book at the desk and leave their coats in the hall. ")
MODEL = "smollm2"
#: The gateway's two ways to ban on vLLM's server (GUARDRAIL_UPSTREAM_LOGITS_PROCESSOR).
BAN_MODES = {"logit_bias": "off", "logits_processor": "on"}
READY_TIMEOUT_S = 600
#: ``--split-cpus``: the CPUs of vLLM's server, and of the gateways and this client (``None``: not pinned).
CPUS: dict[str, list[int] | None] = {"upstream": None, "gateway": None}


def pinned(args: list[str], role: str) -> list[str]:
    """``args`` run under ``taskset`` on the CPUs of ``role`` when ``--split-cpus`` pinned them."""
    cpus = CPUS[role]
    return ["taskset", "-c", ",".join(map(str, cpus)), *args] if cpus else args


def split_cpus() -> None:
    """Pin vLLM's server to the first half of this process's CPUs, the gateways and this process to the rest."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("--split-cpus needs two CPUs at least")
    half = len(cpus) // 2
    CPUS.update(upstream=cpus[:half], gateway=cpus[half:])
    os.sched_setaffinity(0, cpus[half:])


def stream(url: str, body: dict) -> tuple[float | None, int, dict | None, float]:
    """(seconds to the first text chunk, completion tokens, usage, seconds in all) of one streamed request."""
    started, first, usage = time.perf_counter(), None, None
    with httpx.stream("POST", url, json={**body, "stream": True, "stream_options": {"include_usage": True}},
                      timeout=600) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices") or ():
                text = choice.get("text") or (choice.get("delta") or {}).get("content")
                if text and first is None:
                    first = time.perf_counter() - started
    return first, (usage or {}).get("completion_tokens", 0), usage, time.perf_counter() - started


def concurrent(requests: list[tuple[str, dict]]) -> tuple[float, list[float]]:
    """Run the requests at once: (aggregate tokens/s, first-text seconds of each)."""
    started = time.perf_counter()
    with ThreadPoolExecutor(len(requests)) as pool:
        results = list(pool.map(lambda r: stream(*r), requests))
    seconds = time.perf_counter() - started
    return sum(r[1] for r in results) / seconds, [r[0] for r in results if r[0] is not None]


def counters(url: str, *names: str) -> dict[str, float]:
    """The named counters' values on ``url``'s ``/metrics``, summed over their labels (0 when absent)."""
    found = dict.fromkeys(names, 0.0)
    for family in text_string_to_metric_families(httpx.get(url + "/metrics", timeout=30).text):
        for sample in family.samples:
            if sample.name in found:
                found[sample.name] += sample.value
    return found


def wait_ready(process: subprocess.Popen, probe, what: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{what} exited before it was ready")
        try:
            if probe():
                return
        except (httpx.HTTPError, KeyError, ValueError):
            pass
        time.sleep(0.5)
    process.kill()
    raise SystemExit(f"{what} was not ready within {READY_TIMEOUT_S} s")


@contextmanager
def vllm_server(python: str, prefix_caching: bool, log: Path) -> Iterator[str]:
    """vLLM's OpenAI server on SmolLM2 as docs/engines.md starts it; yields its URL."""
    port = free_port()
    env = {"VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_CPU_OMP_THREADS_BIND": "nobind", **os.environ}
    if CPUS["upstream"]:  # its compute threads on its own CPUs (vLLM's "first-last" form)
        env["VLLM_CPU_OMP_THREADS_BIND"] = f"{CPUS['upstream'][0]}-{CPUS['upstream'][-1]}"
    args = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_directory(MODEL)),
            "--dtype", "float32", "--enforce-eager", "--max-model-len", "4096", "--block-size", "32",
            "--enable-prompt-tokens-details", "--host", "127.0.0.1", "--port", str(port),
            "--enable-prefix-caching" if prefix_caching else "--no-enable-prefix-caching"]
    with log.open("ab") as out:
        process = subprocess.Popen(pinned(args, "upstream"), env=env, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(process, lambda: httpx.get(url + "/health", timeout=2).status_code == 200, "vLLM's server")
        yield url
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)


@contextmanager
def gateway(upstream: str, logits_processor: str, data_dir: Path) -> Iterator[str | None]:
    """``guardrail serve --engine remote`` in front of ``upstream``; yields its URL, or ``None`` when it refused
    to start (``logits_processor="on"`` and the upstream does not run guardrail's logits processor)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GUARDRAIL_")}
    env.update(GUARDRAIL_DATA_DIR=str(data_dir), GUARDRAIL_LOG_LEVEL="WARNING",
               GUARDRAIL_UPSTREAM_LOGITS_PROCESSOR=logits_processor)
    process = subprocess.Popen(pinned([sys.executable, "-m", "service.cli.main", "serve", "--port", str(port),
                                       "--engine", "remote", "--upstream", upstream, "--tokenizer", MODEL], "gateway"),
                               cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        try:
            wait_ready(process, lambda: httpx.get(url + "/readyz", timeout=2).json()["status"] == "ready",
                       "the gateway")
        except SystemExit:
            yield None
            return
        yield url
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=30)


def long_messages(tokenizer, content: str, context: int) -> list[dict]:
    """A system message of filler and the user turn ``content``, templated to about ``context`` tokens."""
    messages = [{"role": "user", "content": content}]
    room = context - len(prompt_ids(tokenizer, messages=messages)) - 16  # the system turn's own template tokens
    filler = tokenizer.decode(tokenizer.encode(FILLER * (1 + room // 30), add_special_tokens=False)[:max(room, 0)])
    return [{"role": "system", "content": filler}, *messages] if room > 0 else messages


def throughput(upstream: str, model: str, gateways: dict[str, str], tokenizer, tokens: int, reps: int,
               ttft_samples: int) -> dict:
    def direct(content: str) -> tuple[str, dict]:
        ids = prompt_ids(tokenizer, messages=[{"role": "user", "content": content}])
        return upstream + "/v1/completions", {"model": model, "prompt": ids, "temperature": 0,
                                              "max_tokens": tokens, "ignore_eos": True}

    def through(url: str, content: str, **more) -> tuple[str, dict]:
        return url + "/v1/chat/completions", {
            "model": MODEL, "messages": [{"role": "user", "content": content}], "temperature": 0,
            "max_tokens": tokens, "ignore_eos": True, **more}

    targets = {"direct": direct} | {name: (lambda c, u=url: through(u, c)) for name, url in gateways.items()}
    concurrent([build(PROMPTS[0]) for build in targets.values()])  # warm every path (first-request costs)
    result: dict[str, dict] = {}
    ttft: dict[str, list[float]] = {name: [] for name in targets}
    for streams in (1, 8):
        runs: dict[str, list[float]] = {name: [] for name in targets}
        names = list(targets)
        for rep in range(reps):
            for name in names[rep % len(names):] + names[:rep % len(names)]:  # rotate who goes first
                rate, firsts = concurrent([targets[name](p) for p in PROMPTS[:streams]])
                runs[name].append(rate)
                if streams == 1:
                    ttft[name] += firsts
        base = statistics.median(runs["direct"])
        result[f"{streams}_streams"] = {"direct_tokens_per_s": round(base, 2)} | {
            name: {"tokens_per_s": round(statistics.median(runs[name]), 2),
                   "ratio": round(statistics.median(runs[name]) / base, 3)} for name in gateways}
    # What the hop itself adds to the first text: single requests without lists (no hold-back), alternating.
    bare: dict[str, list[float]] = {name: [] for name in targets}
    for index in range(ttft_samples):
        content = PROMPTS[index % len(PROMPTS)]
        for name in targets:
            url, body = targets[name](content) if name == "direct" else through(gateways[name], content, wordlists=[])
            bare[name] += concurrent([(url, {**body, "max_tokens": 4})])[1]
    direct_ttft = statistics.median(bare["direct"])
    return {"throughput": result,
            "ttft_s": {"direct": round(direct_ttft, 4)} | {
                name: {"guarded": round(statistics.median(ttft[name]), 4),
                       "without_lists": round(statistics.median(bare[name]), 4)} for name in gateways},
            "ttft_added_s": {name: round(statistics.median(bare[name]) - direct_ttft, 4) for name in gateways}}


def rollbacks(upstream: str, url: str, tokenizer, context: int, leaks: int) -> dict:
    """Rollback cost through the gateway at ``url`` at about ``context`` tokens of prompt (module docstring)."""
    names = ("guardrail_upstream_requests_total",)
    vllm_names = ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total")
    hits = guarded_s = baseline_s = 0.0
    requests = queried = served = answers = 0.0
    prompt_tokens = []
    for case in LEAKS[:leaks]:
        body = {"model": MODEL, "messages": long_messages(tokenizer, case["prompt"], context), "temperature": 0,
                "max_tokens": case["tokens_to_term"] + 8, "ignore_eos": True, "wordlists": []}
        stream(url + "/v1/chat/completions", {**body, "max_tokens": 1})  # the prompt's blocks, warm for both runs
        *_, seconds = stream(url + "/v1/chat/completions", body)  # the baseline: same tokens, no rollback
        baseline_s += seconds
        before, upstream_before = counters(url, *names), counters(upstream, *vllm_names)
        _, _, usage, seconds = stream(url + "/v1/chat/completions", {**body, "banned_terms": [case["term"]]})
        after, upstream_after = counters(url, *names), counters(upstream, *vllm_names)
        usage = usage or {}
        guarded_s += seconds
        hits += usage.get("rollbacks", 0)
        answers += 1
        requests += after[names[0]] - before[names[0]]
        prompt_tokens.append(usage.get("prompt_tokens", 0))
        # Every request of the answer (the first, warm from the baseline, and the resubmissions) looks its prompt
        # up in vLLM's prefix cache.
        queried += upstream_after[vllm_names[0]] - upstream_before[vllm_names[0]]
        served += upstream_after[vllm_names[1]] - upstream_before[vllm_names[1]]
    return {"prompts": leaks, "prompt_tokens_median": statistics.median(prompt_tokens), "rollbacks": hits,
            "requests_per_rollback": round((requests - answers) / hits, 2) if hits else None,
            "seconds_per_rollback": round((guarded_s - baseline_s) / hits, 3) if hits else None,
            "guarded_s": round(guarded_s, 2), "baseline_s": round(baseline_s, 2),
            "prompt_tokens_asked": int(queried), "served_from_prefix_cache": int(served),
            "prefix_cache_share": round(served / queried, 3) if queried else None}


def run_upstream(upstream: str, args, tokenizer, data: Path, with_throughput: bool) -> dict:
    model = httpx.get(upstream + "/v1/models", timeout=10).json()["data"][0]["id"]
    report: dict = {}
    with gateway(upstream, "off", data / "off") as plain, gateway(upstream, "on", data / "on") as processor:
        gateways = {name: url for name, url in (("logit_bias", plain), ("logits_processor", processor)) if url}
        if "logits_processor" not in gateways:
            report["logits_processor"] = "not on this upstream (install guardrail in its environment)"
        if with_throughput:
            report |= throughput(upstream, model, gateways, tokenizer, args.tokens, args.reps, args.ttft_samples)
        report["rollback"] = {f"{context}_tokens": {name: rollbacks(upstream, url, tokenizer, context, args.leaks)
                                                    for name, url in gateways.items()}
                              for context in args.contexts}
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--upstream", help="a vLLM OpenAI server that runs already (its root URL)")
    where.add_argument("--vllm-python", help="the vLLM environment's python: start the servers here")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--leaks", type=int, default=4)
    parser.add_argument("--ttft-samples", type=int, default=12)
    parser.add_argument("--contexts", type=lambda s: [int(x) for x in s.split(",")], default=[128, 2048])
    parser.add_argument("--split-cpus", action="store_true",
                        help="vLLM on half the CPUs, the gateways and the client on the rest (module docstring)")
    parser.add_argument("--skip-no-cache", action="store_true", help="with --vllm-python: prefix caching on only")
    args = parser.parse_args()
    if args.split_cpus:
        split_cpus()

    tokenizer = load_tokenizer(MODEL)
    with tempfile.TemporaryDirectory(prefix="bench-gateway-") as tmp:
        data = Path(tmp)
        report: dict = {"tokens": args.tokens, "reps": args.reps, "leaks": args.leaks, "contexts": args.contexts,
                        "cpus": CPUS}
        if args.upstream:
            report["upstream"] = {"given": run_upstream(args.upstream, args, tokenizer, data, True)}
        else:
            report["upstream"] = {}
            for caching in (True,) if args.skip_no_cache else (True, False):
                name = "prefix_caching_on" if caching else "prefix_caching_off"
                with vllm_server(args.vllm_python, caching, ROOT / ".cache" / f"bench-gateway-{name}.log") as url:
                    report["upstream"][name] = run_upstream(url, args, tokenizer, data / name, caching)
        print(json.dumps(report))


if __name__ == "__main__":
    main()
