"""Every spec shipped in specs/: valid against the schema, names real classes, validated without torch."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from helpers import ROOT
from torch import nn

from yamltrace.spec import SCHEMA_FILE, SCHEMA_ID, load_schema, validate_spec

SPECS = sorted((ROOT / "specs").glob("*.yaml"))


def test_schema_itself_is_valid() -> None:
    jsonschema.Draft202012Validator.check_schema(load_schema())


def test_specs_are_shipped() -> None:
    names = {p.name for p in SPECS}
    assert {"tiny.yaml", "tiny-last-layers.yaml"} <= names


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_shipped_spec_is_valid(path: Path) -> None:
    document = validate_spec(path)
    assert document.data["yamltrace"] == 1
    assert document.data["outputs"]


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_shipped_spec_points_editors_at_the_schema_file(path: Path) -> None:
    """The modeline names a file (the `$id` URL is an identifier nothing serves) that is the packaged schema."""
    first_line = path.read_text(encoding="utf-8").splitlines()[0]
    prefix = "# yaml-language-server: $schema="
    assert first_line == f"{prefix}../schemas/{SCHEMA_FILE}"
    target = path.parent / first_line.removeprefix(prefix)
    assert target.read_bytes() == (path.parents[1] / "yamltrace" / "schemas" / SCHEMA_FILE).read_bytes()
    assert json.loads(target.read_text(encoding="utf-8"))["$id"] == SCHEMA_ID


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_shipped_spec_names_module_classes_of_its_imports(path: Path) -> None:
    data = validate_spec(path).data
    modules = [importlib.import_module(name) for name in data["imports"]]
    for key, value in data["outputs"].items():
        for recorder in value if isinstance(value, list) else [value]:
            name = recorder if isinstance(recorder, str) else recorder["target"]
            found = [getattr(m, name) for m in modules if hasattr(m, name)]
            assert found and issubclass(found[0], nn.Module), (key, name)


def test_tiny_spec_matches_the_tiny_model_map() -> None:
    from yamltrace.examples.tiny import TinyModel

    outputs = validate_spec(ROOT / "specs" / "tiny.yaml").data["outputs"]
    assert outputs == {key: cls.__name__ for key, cls in TinyModel._can_record_outputs.items()}


def test_last_layers_spec_selects_first_and_last() -> None:
    outputs = validate_spec(ROOT / "specs" / "tiny-last-layers.yaml").data["outputs"]
    assert {key: value["layers"] for key, value in outputs.items()} == {"hidden_states": [0, -1], "attentions": [0, -1]}


def test_validation_imports_neither_torch_nor_the_named_modules() -> None:
    script = (
        "import json, sys\n"
        "from yamltrace.spec import validate_spec\n"
        f"for path in {json.dumps([str(p) for p in SPECS])}:\n"
        "    validate_spec(path)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers') or m == 'yamltrace.examples.tiny')))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=ROOT)
    assert json.loads(result.stdout) == []
