# Two entry points (see README): `make demo` and `make test`. Each sets up .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt

.PHONY: demo test bench bench-icount fidelity clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# The demo needs the `torch` extra (torch + safetensors, pinned to the CPU build by constraints.txt);
# a bare `pip install yamltrace` is the light core (PyYAML + jsonschema) for validating specs.
$(VENV)/.runtime: pyproject.toml constraints.txt | $(BIN)/python
	$(PIP) -e ".[torch]"
	touch $@

$(VENV)/.test: pyproject.toml constraints.txt $(VENV)/.runtime
	$(PIP) -e ".[torch,test]"
	touch $@

demo: $(VENV)/.runtime
	$(BIN)/python -m yamltrace.examples.demo

test: $(VENV)/.test
	$(BIN)/python -m pytest

bench: $(VENV)/.test
	$(BIN)/python -m pytest tests/benchmarks -s -p no:cacheprovider

# The architecture sweep over every transformers class that records outputs (~7-10 min on 2 cores).
$(VENV)/.fidelity: pyproject.toml constraints.txt $(VENV)/.test
	$(PIP) -e ".[torch,test,fidelity]"
	touch $@

fidelity: $(VENV)/.fidelity
	HF_HUB_OFFLINE=1 PYTHONPATH=tests $(BIN)/python -m oracle.sweep --jobs 2 --out docs/fidelity.md

# Instructions per forward under callgrind (docs/performance.md); skipped with a message without valgrind.
bench-icount: $(VENV)/.test
	$(BIN)/python tests/benchmarks/icount.py

clean:
	rm -rf $(VENV) build dist *.egg-info
