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
PIP_VERSION := 26.3
PIP_TOOLS := pip-tools>=7.4,<8
# pip-compile options shared by every lock: no machine's index or wheel folders in the files.
COMPILE := CUSTOM_COMPILE_COMMAND="make lock" $(BIN)/pip-compile --quiet --strip-extras \
	--no-emit-index-url --no-emit-find-links --no-emit-trusted-host

.PHONY: install models serve test test-deps lint format clean lock

# Exact versions from the lock (requirements/, docs/deployment.md): every fresh install gets the
# same packages; verilive itself goes in without resolving anything again.
$(STAMP): pyproject.toml Makefile requirements/dev.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet "pip==$(PIP_VERSION)"
	$(BIN)/python -m pip install --quiet -r requirements/dev.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
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

# Refresh the locks from pyproject.toml (newest versions within its ranges): runtime (the service
# image), convert (the image's model stage), dev (make, CI). The CPU torch build's local label
# (+cpu) is dropped: torch==2.13.0 matches it where it is, and the upstream wheel elsewhere.
lock: $(STAMP)
	$(BIN)/python -m pip install --quiet "$(PIP_TOOLS)"
	$(COMPILE) --extra postgres --extra redis -o requirements/runtime.txt pyproject.toml
	$(COMPILE) --extra convert -o requirements/convert.txt pyproject.toml
	$(COMPILE) --extra dev --extra convert --extra postgres --extra redis -o requirements/dev.txt pyproject.toml
	sed -i 's/^\(torch==[^+ ]*\)+[^ ]*/\1/' requirements/*.txt

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
