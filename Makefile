# Developer entry points. README.md names the two that matter: `make test` and (later) `make demo`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test install lint typecheck unit generate crds docs image clean

# Everything CI runs: install, static checks, then the test suite.
test: install lint typecheck unit

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

lint: install
	$(BIN)/ruff check joulie tests
	$(BIN)/ruff format --check joulie tests

typecheck: install
	$(BIN)/mypy joulie

unit: install
	$(BIN)/pytest -q

# Regenerate what is derived from the code (CI fails when the committed copies are stale).
generate: crds docs

crds: install
	$(BIN)/joulie crds --dir manifests/crds

docs: install
	$(BIN)/python -m joulie.docs README.md

image:
	docker build -t joulie:0.1.0 .

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
