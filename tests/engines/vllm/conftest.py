"""One in-process vllm-cpu engine on SmolLM2 for the whole session, and plain vLLM in a subprocess.

These tests run with the `.venv-vllm` python (``make vllm-install``); where ``vllm`` is not importable every
test here is skipped (each module calls ``pytest.importorskip("vllm")``).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# vLLM's CPU backend pins its OpenMP threads to cores by default; on a machine whose cores other processes
# also use, that stalls decoding (measured here: 0.8 tokens/s pinned, ~10 unpinned).
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

PLAIN_VLLM = Path(__file__).with_name("plain_vllm.py")


@pytest.fixture(scope="session")
def driver():
    pytest.importorskip("vllm.v1.sample.logits_processor")
    from guardrail.engines.vllm.driver import VLLMDriver

    # enforce_eager: starts in ~10 s instead of ~3 min of graph capture on this CPU; same outputs.
    started = VLLMDriver.load("smollm2", enforce_eager=True)
    yield started
    started.close()


@pytest.fixture(scope="session")
def chat_ids(driver):
    from transformers import AutoTokenizer

    from guardrail.prompts import prompt_ids

    tokenizer = AutoTokenizer.from_pretrained(driver.engine.model_config.tokenizer)
    return lambda text: prompt_ids(tokenizer, messages=[{"role": "user", "content": text}])


@pytest.fixture(scope="session")
def run_plain_vllm():
    return _run_plain_vllm


def _run_plain_vllm(requests: list[dict]) -> list[dict]:
    """Run ``requests`` (``{"prompt_ids": [...], "sampling": {vllm.SamplingParams kwargs}}``) through
    ``vllm.LLM`` in a fresh process — vLLM as its users run it, our plugin loaded by entry point — and
    return ``[{"token_ids": [...], "text": str}]`` in order."""
    done = subprocess.run([sys.executable, str(PLAIN_VLLM)], input=json.dumps(requests), capture_output=True,
                          text=True, timeout=900, env=os.environ.copy())
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
