#!/usr/bin/env bash
# The GPU check of the batch-level guard step (issue 29; docs/benchmarks.md, "The guard at batch scale").
# Never needed by CI or the tests; one run takes at most 8 minutes on one NVIDIA GPU:
#   1. bench/batch_guard.py with the logits on the GPU (host and synchronised times, 1/64/256 rows, both
#      vocabs): the vLLM processor, the batch step alone, vLLM's bad_words, no guard;
#   2. where vLLM's CUDA build is installed: guarded ÷ unguarded tokens/s at 64 and 256 concurrent requests
#      (SmolLM2 through vLLM's LLM with guardrail's logits processor).
# Needs a checkout set up with `make install` (.venv) and, for part 2 and the processor in part 1, a Python
# with vLLM's CUDA build and this checkout importable (VLLM_PYTHON, default .venv-vllm/bin/python).
# On a machine without the bundled model packages, TOKENIZER_DIR names a folder holding each vocab's tokenizer
# as <name>/ (save_pretrained of guardrail.models.load_tokenizer(name)); part 1 then needs only the project's
# pure dependencies (numpy, torch, transformers, cachetools, marisa-trie, platformdirs, pyahocorasick).
# Writes one JSON object per part to $OUT (default bench-gpu/) and prints them.
#
#   bash bench/gpu_check.sh            # PYTHON=... VLLM_PYTHON=... OUT=... TOKENIZER_DIR=... to override
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
VLLM_PYTHON=${VLLM_PYTHON:-.venv-vllm/bin/python}
OUT=${OUT:-bench-gpu}
TOKENIZERS=()
[ -n "${TOKENIZER_DIR:-}" ] && TOKENIZERS=(--tokenizer-dir "$TOKENIZER_DIR")
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"

cuda_vllm() {
  [ -x "$VLLM_PYTHON" ] && "$VLLM_PYTHON" - <<'PY' 2>/dev/null
import torch, vllm  # noqa: F401
assert torch.cuda.is_available() and torch.version.cuda
PY
}

if cuda_vllm; then BATCH_PYTHON=$VLLM_PYTHON; else BATCH_PYTHON=$PYTHON; fi
echo "== 1. batch guard step, logits on the GPU ($BATCH_PYTHON)"
timeout 240 "$BATCH_PYTHON" bench/batch_guard.py --device cuda --steps 64 --warmup 16 "${TOKENIZERS[@]}" | tee "$OUT/batch_guard_cuda.json"

if cuda_vllm; then
  echo "== 2. vLLM guarded ÷ unguarded tokens/s at 64 and 256 requests"
  timeout 240 "$VLLM_PYTHON" bench/batch_guard.py --throughput 64,256 --max-tokens 128 --reps 2 \
    | tee "$OUT/vllm_throughput.json"
else
  echo "== 2. skipped: no vLLM CUDA build at $VLLM_PYTHON" | tee "$OUT/vllm_throughput.json"
fi
