# The two commands a newcomer needs: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: setup test check run bench clean

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

bench: setup
	$(BIN)/python benchmarks/run_bench.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
