# purgekeeper: `make run` and `make test` are the two set-up commands.
# Every target creates .venv when it is missing. `run` installs what the program needs
# (`pip install -e .`); `test`, `lint` and `bench` also install the dev tools ('.[dev]').

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
RUNTIME := $(VENV)/.installed-runtime
PROCFILE := $(VENV)/.installed-procfile
DEV := $(VENV)/.installed-dev

.PHONY: run procfile test lint docs bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(RUNTIME): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	@touch $(RUNTIME)

$(PROCFILE): pyproject.toml $(RUNTIME)
	$(BIN)/python -m pip install --quiet -e '.[procfile]'
	@touch $(PROCFILE)

$(DEV): pyproject.toml $(RUNTIME)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(DEV)

# The whole system on the embedded default: the HTTP API, /status, /metrics, an in-process
# worker and scheduler, on SQLite in the data directory every purgekeeper process uses by
# default (PURGEKEEPER_DATA_DIR, else $XDG_DATA_HOME/purgekeeper, else
# ~/.local/share/purgekeeper): purgectl and purgekeeper.open() find the same database.
# It prints the URL and the token's file. `make run SERVE_FLAGS=--demo` seeds a demo.
# The port (8080) is bound before anything is served: when it is in use, serve says so and
# exits 4 (make reports "Error 4"); `make run SERVE_FLAGS="--port 8081"` serves on another.
run: $(RUNTIME)
	$(BIN)/purgectl init
	$(BIN)/purgectl serve $(SERVE_FLAGS)

# The suite runs in parallel (pytest-xdist): one worker per core, at most 4. Most of a test's
# time is spent waiting (a database created, a process started), so two workers on two cores
# take half the time of one. Every worker has its own databases and Redis db (tests/conftest.py).
# It ends with the 25 slowest tests (the suite must stay under 15 minutes on CI).
# `make test PYTEST_FLAGS=` runs it in one process; `PYTEST_FLAGS="-x -k ..."` narrows it.
# The tests' own files (SQLite databases, checkpoint directories, blob and file roots) are
# real files on a tmpfs where the machine has one (/dev/shm): an acceptance's copy and signed
# log fsync several files, and on this machine's disk each fsync costs about a millisecond.
# The shared PostgreSQL keeps its own storage. `make test TEST_TMP=` keeps pytest's default.
# The project's modules are compiled first: hundreds of tests start purgectl, a worker or the
# API as a process, and where PYTHONDONTWRITEBYTECODE is set each would compile them again.
TEST_TMP ?= $(shell [ -d /dev/shm ] && [ -w /dev/shm ] && echo /dev/shm/purgekeeper-tests-$$(pwd | cksum | cut -d' ' -f1))
PYTEST_FLAGS ?= -n auto --maxprocesses 4 --dist worksteal --durations=25

# The Procfile's three processes (api, worker, scheduler) on PostgreSQL and Redis, under honcho
# (installed here, from the `procfile` extra). PURGEKEEPER_DATABASE_URL and
# PURGEKEEPER_BROKER_URL must name them: the worker line refuses to start without a broker.
# Ctrl+C sends SIGTERM to every process, and each stops cleanly (docs/guides/stopping.md).
procfile: $(PROCFILE)
	$(BIN)/purgectl init
	$(BIN)/honcho start

test: $(DEV)
	@$(BIN)/python -m compileall -q -j 0 purgekeeper commands schema workers storage tlog
	@status=0; $(BIN)/python -m pytest $(PYTEST_FLAGS) $(if $(TEST_TMP),--basetemp=$(TEST_TMP)) || status=$$?; \
		$(if $(TEST_TMP),rm -rf $(TEST_TMP);) exit $$status

lint: $(DEV)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The manual (mkdocs.yml) into site/: strict, so a broken link or a missing reference fails
# it, as tests/test_docs.py does on every `make test`.
docs: $(DEV)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

bench: $(DEV)
	@set -e; found=0; for script in bench/acceptance.py bench/cleanup.py bench/interference.py bench/broker_mode.py bench/scrape.py bench/scale.py bench/erasure.py bench/retention.py bench/receipts.py bench/sealing.py; do \
		[ -e "$$script" ] || continue; found=1; echo "== $$script"; $(BIN)/python bench/record.py "$${script#bench/}"; \
	done; [ $$found = 1 ] || echo "no benchmarks in bench/ yet"; $(BIN)/python bench/compare.py || true

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
