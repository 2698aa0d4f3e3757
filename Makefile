# Two entry points: `make run` (the product on the embedded stack) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: run test lint install bench clean

$(BIN)/.installed: pyproject.toml tooling/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]' -e tooling
	touch $@

install: $(BIN)/.installed

run: install
	$(BIN)/toolsift up

# The bench scripts import their siblings by name, so each of their folders is its own root.
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy platform/toolsift tooling/toolsift_tooling workers
	MYPYPATH=benchmarks $(BIN)/mypy benchmarks/*.py
	MYPYPATH=benchmarks/quality $(BIN)/mypy benchmarks/quality/*.py

test: lint
	$(BIN)/pytest -n 2 --dist loadfile

bench: install
	$(BIN)/toolsift bench select

clean:
	rm -rf $(VENV) .toolsift
