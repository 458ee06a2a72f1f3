# The README's commands. Both work on a fresh machine with Python 3.11+ and Java 17.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Spark's Python workers must run the interpreter that has icesink installed.
export PYSPARK_PYTHON := $(abspath $(BIN)/python)
export PYSPARK_DRIVER_PYTHON := $(abspath $(BIN)/python)

.PHONY: install demo test test-fast lint bench clean

$(BIN)/icesink: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

install: $(BIN)/icesink

demo: install
	$(BIN)/python examples/demo.py

test: install lint
	$(BIN)/pytest

test-fast: install
	$(BIN)/pytest -m "not faults and not interop"

lint: install
	$(BIN)/ruff check icesink tests bench examples
	$(BIN)/ruff format --check icesink tests bench examples
	$(BIN)/mypy

bench: install
	$(BIN)/python bench/append_throughput.py

clean:
	rm -rf $(VENV) warehouse .icesink-demo
