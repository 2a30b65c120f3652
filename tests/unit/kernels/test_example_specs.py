"""The kernel specs shown in docs/kernels.md (docs/specs/) are valid, and validating them imports nothing."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import ROOT

from yamltrace.spec import SCHEMA_FILE, SCHEMA_ID, validate_spec

EXAMPLES = sorted((ROOT / "docs" / "specs").glob("*.yaml"))


def test_the_examples_are_there():
    assert {p.name for p in EXAMPLES} >= {"llama-kernels.yaml", "llama-liger.yaml"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_spec_is_valid_and_points_editors_at_the_schema(path):
    document = validate_spec(path)
    assert document.data["yamltrace"] == 1 and document.data["patches"]
    first = path.read_text(encoding="utf-8").splitlines()[0]
    assert first == f"# yaml-language-server: $schema=../../schemas/{SCHEMA_FILE}"  # a file, found offline
    target = path.parent / first.split("$schema=", 1)[1]
    assert json.loads(target.read_text(encoding="utf-8"))["$id"] == SCHEMA_ID


def test_the_liger_example_conditions_the_triton_kernels_on_cuda():
    patches = validate_spec(ROOT / "docs" / "specs" / "llama-liger.yaml").data["patches"]
    liger = {key: value for key, value in patches.items() if "liger_kernel" in str(value)}
    assert liger and all(value["device"] == "cuda" for value in liger.values())


def test_validating_the_liger_example_imports_neither_liger_nor_transformers():
    code = (
        "import sys; from yamltrace.spec import validate_spec; "
        f"validate_spec({str(ROOT / 'docs' / 'specs' / 'llama-liger.yaml')!r}); "
        "print(sorted(m for m in ('liger_kernel', 'transformers') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert result.stdout.strip() == "[]"
