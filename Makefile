# Two entry points (see README): `make demo` and `make test`. Each sets up .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP_INSTALL := python -m pip install --quiet --disable-pip-version-check
PIP := $(BIN)/$(PIP_INSTALL) -c constraints.txt
PINS := constraints.txt constraints/common.txt
LSP := .cache/lsp

# The transformers versions of the test matrix, oldest first: each has constraints/transformers-<v>.txt
# and its own .venv-<v>. Adding a release is one version here and one constraints file (CONTRIBUTING.md).
COMPAT_VERSIONS := 5.23.0 5.24.0 5.25.0

.PHONY: demo test lsp bench bench-icount bench-peers fidelity compat print-compat-versions print-compat-torch clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# The demo needs the `torch` extra (torch + safetensors, pinned to the CPU build by constraints.txt);
# a bare `pip install yamltrace` is the light core (PyYAML + jsonschema) for validating specs.
$(VENV)/.runtime: pyproject.toml $(PINS) | $(BIN)/python
	$(PIP) -e ".[torch]"
	touch $@

$(VENV)/.test: pyproject.toml $(PINS) $(VENV)/.runtime
	$(PIP) -e ".[torch,test]"
	touch $@

demo: $(VENV)/.runtime
	$(BIN)/python -m yamltrace.examples.demo

test: $(VENV)/.test $(LSP)/.installed
	$(BIN)/python -m pytest

# The inner loop: the unit tests without the oracle and `slow` markers (no subprocess environments,
# compile, FIFO or timeout tests). `make test` and CI run everything.
.PHONY: test-fast
test-fast: $(VENV)/.test
	$(BIN)/python -m pytest tests/unit -m "not oracle and not slow" -q

# The YAML language server that tests/integration/test_editor_lsp.py drives over LSP (node and npm),
# installed once from tools/lsp's package-lock.json into $(LSP).
$(LSP)/.installed: tools/lsp/package.json tools/lsp/package-lock.json
	mkdir -p $(LSP)
	cp tools/lsp/package.json tools/lsp/package-lock.json $(LSP)/
	npm ci --prefix $(LSP) --no-audit --no-fund --loglevel=error
	touch $@

lsp: $(LSP)/.installed

bench: $(VENV)/.test
	$(BIN)/python -m pytest tests/benchmarks -s -p no:cacheprovider

# The architecture sweep over every transformers class that records outputs (~7-10 min on 2 cores).
$(VENV)/.fidelity: pyproject.toml $(PINS) $(VENV)/.test
	$(PIP) -e ".[torch,test,fidelity]"
	touch $@

fidelity: $(VENV)/.fidelity
	HF_HUB_OFFLINE=1 PYTHONPATH=tests $(BIN)/python -m oracle.sweep --jobs 2 --out docs/fidelity.md

# The oracle tests (tests/oracle, the popular-family sweep subset included) on every matrix version;
# `make compat-5.24.0` runs one. Each version's failures are reported; the target fails if any did.
.venv-%/.test: pyproject.toml constraints/common.txt constraints/transformers-%.txt
	test -x .venv-$*/bin/python || $(PYTHON) -m venv .venv-$*
	.venv-$*/bin/$(PIP_INSTALL) -c constraints/transformers-$*.txt -e ".[torch,test]"
	touch $@

compat-%: .venv-%/.test
	HF_HUB_OFFLINE=1 .venv-$*/bin/python -m pytest tests/oracle -q -p no:cacheprovider

# The torch axis. pyproject's torch floor is the torch of every environment above (constraints/common.txt);
# COMPAT_TORCH adds newer releases (the newest on this machine's disk), each with the default transformers
# of constraints.txt. `make compat-torch-2.14.1` runs one: the oracle tests and the compile tests.
COMPAT_TORCH := 2.14.1

.venv-torch-%/.test: pyproject.toml constraints.txt constraints/common.txt
	test -x .venv-torch-$*/bin/python || $(PYTHON) -m venv .venv-torch-$*
	sed 's/^torch==.*/torch==$*/' constraints/common.txt > .venv-torch-$*/common.txt
	sed 's|^-c constraints/common.txt$$|-c common.txt|' constraints.txt > .venv-torch-$*/constraints.txt
	.venv-torch-$*/bin/$(PIP_INSTALL) -c .venv-torch-$*/constraints.txt -e ".[torch,test]"
	touch $@

compat-torch-%: .venv-torch-%/.test
	HF_HUB_OFFLINE=1 .venv-torch-$*/bin/python -m pytest tests/oracle tests/integration/test_compile.py -q -p no:cacheprovider

# The environments are kept between runs (make would delete them as intermediate files).
.PRECIOUS: .venv-%/.test .venv-torch-%/.test

print-compat-versions:
	@echo $(COMPAT_VERSIONS)

print-compat-torch:
	@echo $(COMPAT_TORCH)

compat:
	@failed=""; for v in $(COMPAT_VERSIONS); do $(MAKE) --no-print-directory compat-$$v || failed="$$failed transformers-$$v"; done; \
	for t in $(COMPAT_TORCH); do $(MAKE) --no-print-directory compat-torch-$$t || failed="$$failed torch-$$t"; done; \
	if [ -n "$$failed" ]; then echo "make compat: tests failed under$$failed"; exit 1; fi

# The full architecture sweep under one matrix version (its section of docs/fidelity.md, or OUT=PATH).
OUT ?= docs/fidelity.md
fidelity-%: .venv-%/.test
	.venv-$*/bin/$(PIP_INSTALL) -c constraints/transformers-$*.txt -e ".[torch,test,fidelity]"
	HF_HUB_OFFLINE=1 PYTHONPATH=tests .venv-$*/bin/python -m oracle.sweep --jobs 2 --out $(OUT)

# The vision environment (docs/vision.md): timm, torchvision and diffusers (the `vision` extra) on the
# torch of constraints/vision.txt, with every other pin of constraints.txt; runs tests/vision, which
# the default suite does not collect (pyproject's norecursedirs). About 5.5 GB: torch 2.14.1 is a CUDA build.
VISION := .venv-vision

$(VISION)/.test: pyproject.toml constraints.txt constraints/common.txt constraints/vision.txt
	test -x $(VISION)/bin/python || $(PYTHON) -m venv $(VISION)
	sed '/^torch==/d' constraints/common.txt > $(VISION)/common.txt
	sed 's|^-c constraints/common.txt$$|-c common.txt|' constraints.txt > $(VISION)/constraints.txt
	$(VISION)/bin/$(PIP_INSTALL) -c $(VISION)/constraints.txt -c constraints/vision.txt -e ".[torch,test,vision]"
	touch $@

.PHONY: test-vision
test-vision: $(VISION)/.test
	HF_HUB_OFFLINE=1 $(VISION)/bin/python -m pytest tests/vision -q -p no:cacheprovider

# Instructions per forward under callgrind (docs/performance.md); skipped with a message without valgrind.
bench-icount: $(VENV)/.test
	$(BIN)/python tests/benchmarks/icount.py
	$(BIN)/python tests/benchmarks/icount_blocks.py

# yamltrace beside nnsight, pyvene and TransformerLens (the `bench` extra), tables into docs/performance.md.
$(VENV)/.bench: pyproject.toml $(PINS) $(VENV)/.test
	$(PIP) -e ".[torch,test,bench]"
	touch $@

bench-peers: $(VENV)/.bench
	HF_HUB_OFFLINE=1 $(BIN)/python tests/benchmarks/peers.py --write docs/performance.md

clean:
	rm -rf $(VENV) .venv-* build dist *.egg-info .cache/lsp
