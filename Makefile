# The two commands a newcomer needs: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Two stamps: running needs kvbench and the fast extra; testing and checking add the dev tools and Ray.
RUN_STAMP := $(VENV)/.run-stamp
DEV_STAMP := $(VENV)/.dev-stamp
PIP := $(BIN)/python -m pip install -q --disable-pip-version-check

.PHONY: setup setup-dev test check run bench bench-readme clean

setup: $(RUN_STAMP)
setup-dev: $(DEV_STAMP)

$(VENV)/bin/python:
	$(PY) -m venv $(VENV)

# Reinstall only when the project's dependencies (or the mock's C accelerator, built in place by the
# editable install) change; otherwise setup is instant.
NATIVE := kvbench/mock/_native.c
$(RUN_STAMP): pyproject.toml $(NATIVE) | $(VENV)/bin/python
	$(PIP) -e '.[fast]'
	touch $(RUN_STAMP)

# the dev install holds everything running needs, so it also satisfies `make run`
$(DEV_STAMP): pyproject.toml $(NATIVE) | $(VENV)/bin/python
	$(PIP) --upgrade pip
	$(PIP) -e '.[dev,fast,ray]'
	touch $(DEV_STAMP) $(RUN_STAMP)

test: setup-dev
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

check: setup-dev
	$(BIN)/ruff check kvbench tests benchmarks
	$(BIN)/ruff format --check kvbench tests benchmarks
	$(BIN)/mypy kvbench

run: setup
	$(BIN)/kvbench run ttft

# ~8 min; BENCH_ARGS=--no-peers skips vLLM bench serve and the aiohttp client (the README is then left alone)
bench: setup-dev
	$(BIN)/python benchmarks/run_bench.py $(BENCH_ARGS)
	$(BIN)/python benchmarks/readme_table.py

# the README's performance table from benchmarks/results/latest.md (only a full run with peers)
bench-readme:
	$(BIN)/python benchmarks/readme_table.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
