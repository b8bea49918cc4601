# purgekeeper: `make run` and `make test` are the two set-up commands.
# Every target creates .venv when it is missing and installs the project into it.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DATA_DIR ?= $(CURDIR)/.purgekeeper

.PHONY: run test lint bench clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

# The whole system on the embedded default: the HTTP API, /status, /metrics, an in-process
# worker and scheduler, on SQLite under $(DATA_DIR). It prints the URL and the token's file.
run: $(STAMP)
	PURGEKEEPER_DATA_DIR=$${PURGEKEEPER_DATA_DIR:-$(DATA_DIR)} $(BIN)/purgectl init
	PURGEKEEPER_DATA_DIR=$${PURGEKEEPER_DATA_DIR:-$(DATA_DIR)} $(BIN)/purgectl serve $(SERVE_FLAGS)

test: $(STAMP)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

bench: $(STAMP)
	@set -e; found=0; for script in bench/acceptance.py bench/cleanup.py bench/scale.py bench/erasure.py bench/retention.py; do \
		[ -e "$$script" ] || continue; found=1; echo "== $$script"; $(BIN)/python "$$script"; \
	done; [ $$found = 1 ] || echo "no benchmarks in bench/ yet"

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
