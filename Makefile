# The two commands a newcomer needs: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: setup test check run bench bench-readme clean

setup: $(STAMP)

# Reinstall only when the project's dependencies change; otherwise setup is instant.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,fast,ray]'
	touch $(STAMP)

test: setup
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

check: setup
	$(BIN)/ruff check kvbench tests benchmarks
	$(BIN)/ruff format --check kvbench tests benchmarks
	$(BIN)/mypy kvbench

run: setup
	$(BIN)/kvbench run ttft

# ~8 min; BENCH_ARGS=--no-peers skips vLLM bench serve and the aiohttp client (the README is then left alone)
bench: setup
	$(BIN)/python benchmarks/run_bench.py $(BENCH_ARGS)
	$(BIN)/python benchmarks/readme_table.py

# the README's performance table from benchmarks/results/latest.md (only a full run with peers)
bench-readme:
	$(BIN)/python benchmarks/readme_table.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
