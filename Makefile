# Two entry points (see README): `make demo` and `make test`. Each sets up .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt

.PHONY: demo test bench bench-icount clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.runtime: pyproject.toml constraints.txt | $(BIN)/python
	$(PIP) -e .
	touch $@

$(VENV)/.test: pyproject.toml constraints.txt $(VENV)/.runtime
	$(PIP) -e ".[test]"
	touch $@

demo: $(VENV)/.runtime
	$(BIN)/python -m yamltrace.examples.demo

test: $(VENV)/.test
	$(BIN)/python -m pytest

bench: $(VENV)/.test
	$(BIN)/python -m pytest tests/benchmarks -s -p no:cacheprovider

# Instructions per forward under callgrind (docs/performance.md); skipped with a message without valgrind.
bench-icount: $(VENV)/.test
	$(BIN)/python tests/benchmarks/icount.py

clean:
	rm -rf $(VENV) build dist *.egg-info
