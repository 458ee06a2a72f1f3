# The README's commands. Both work on a fresh machine with Python 3.11+ and Java 17.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Spark's Python workers must run the interpreter that has icesink installed.
export PYSPARK_PYTHON := $(abspath $(BIN)/python)
export PYSPARK_DRIVER_PYTHON := $(abspath $(BIN)/python)

# Iceberg's Java reference implementation, for interop tests only: Spark 3.5 and the
# Iceberg 1.9.2 runtime jar, both from PyPI, in an environment of their own.
JAVA_READER := .venv-iceberg-java

.PHONY: install install-interop demo test test-fast lint bench bench-upsert clean histories docs docs-serve charts

$(BIN)/icesink: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

$(JAVA_READER)/bin/python:
	$(PYTHON) -m venv $(JAVA_READER)
	$(JAVA_READER)/bin/pip install --quiet "pyspark==3.5.9" "snowpark-connect-deps-iceberg==1.0.1"

install: $(BIN)/icesink

install-interop: $(JAVA_READER)/bin/python

# Class-data-sharing archives that start the tests' Spark drivers about twice as fast (tests/helpers/jvm_classes.py),
# one per environment, made once. Without one, Spark starts as before: a failure here does not stop the tests.
CLASS_ARCHIVES := $(VENV)/spark-classes.jsa $(JAVA_READER)/spark-classes.jsa

$(VENV)/spark-classes.jsa: $(BIN)/icesink
	-$(BIN)/python tests/helpers/jvm_classes.py

$(JAVA_READER)/spark-classes.jsa: $(JAVA_READER)/bin/python
	-$(JAVA_READER)/bin/python tests/helpers/jvm_classes.py

demo: install
	$(BIN)/python examples/demo.py

# Two test processes, each with its own Spark session: one computes while the other waits on a JVM starting or
# a killed process (tests/conftest.py says which tests keep to one process). TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2
PYTEST_PARALLEL := -n $(TEST_WORKERS)

test: install install-interop lint $(CLASS_ARCHIVES)
	$(BIN)/pytest $(PYTEST_PARALLEL)

test-fast: install $(VENV)/spark-classes.jsa
	$(BIN)/pytest $(PYTEST_PARALLEL) -m "not faults and not interop and not cluster"

bench-upsert: install
	$(BIN)/python bench/upsert.py

lint: install
	$(BIN)/ruff check icesink tests bench examples docs/hooks
	$(BIN)/ruff format --check icesink tests bench examples docs/hooks
	$(BIN)/mypy

bench: install
	$(BIN)/python bench/append_throughput.py

# The documentation site (mkdocs-material) into site/; `make test` builds it strictly too.
export NO_MKDOCS_2_WARNING := 1
docs: install
	$(BIN)/mkdocs build --strict

docs-serve: install
	$(BIN)/mkdocs serve

# Draw every benchmark chart (docs/charts/) again from the recorded figures (bench/results/).
charts: install
	$(BIN)/python bench/figures.py

clean:
	rm -rf $(VENV) $(JAVA_READER) warehouse .icesink-demo site

# Random histories against a model (tests/histories): MINUTES of new seeds, or SEED=N to replay one
# (a failure prints the LENGTH, SPARK and CATALOG to replay it with).
MINUTES ?= 10
LENGTH ?= 30
histories: install install-interop $(CLASS_ARCHIVES)
	$(BIN)/python -m tests.histories --minutes $(MINUTES) --length $(LENGTH) $(if $(SEED),--seed $(SEED),) $(if $(SPARK),--spark $(SPARK),) $(if $(CATALOG),--catalog $(CATALOG),)
