"""The spec JSON Schema and validate_spec: fixture files with their exact messages, schema quality, packaging."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from helpers import DATA, ROOT

from yamltrace.errors import SpecError
from yamltrace.spec import SCHEMA_FILE, SCHEMA_ID, load_schema, validate_spec
from yamltrace.spec import read_spec_document

VALID = sorted((DATA / "valid").glob("*.yaml"))
INVALID = sorted((DATA / "invalid").glob("*.yaml"))


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.stem)
def test_valid_fixture_validates_to_expected_data(path: Path) -> None:
    document = validate_spec(path)
    expected = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))
    # Compared as JSON text so that key order (which patches depend on) is checked too.
    assert json.dumps(document.data) == json.dumps(expected)


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.stem)
def test_invalid_fixture_reports_exact_messages(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    relative = path.relative_to(ROOT)
    expected = path.with_suffix(".expected").read_text(encoding="utf-8").splitlines()
    with pytest.raises(SpecError) as caught:
        validate_spec(relative)
    assert str(caught.value).splitlines() == expected
    assert [issue.render() for issue in caught.value.issues] == expected


def test_every_invalid_fixture_has_expected_messages() -> None:
    assert INVALID and all(p.with_suffix(".expected").is_file() for p in INVALID)
    assert VALID and all(p.with_suffix(".json").is_file() for p in VALID)


def test_text_source_is_located_too() -> None:
    text = "yamltrace: 1\noutputs:\n  attentions: {target: LlamaAttention, index: one}\n"
    with pytest.raises(SpecError) as caught:
        validate_spec(text)
    assert str(caught.value) == "<string>:3:47: $.outputs.attentions.index: 'one' is not of type 'integer'"


def test_mapping_source_reports_paths_without_lines() -> None:
    with pytest.raises(SpecError) as caught:
        validate_spec({"yamltrace": 1, "outputs": {"a": ("X", {"target": "Y", "index": 1.0})}})
    assert str(caught.value) == (
        "<mapping>: $.outputs.a[1].index: 1.0 is not of type 'integer'; "
        "write a plain decimal integer (no leading zeros, underscores, 0o/0x or dot)"
    )


def test_validate_returns_the_document_and_accepts_one() -> None:
    document = read_spec_document("yamltrace: 1\n")
    assert validate_spec(document) is document


def test_all_issues_are_reported_not_only_the_first() -> None:
    text = "yamltrace: 3\nmodel: 1\noutputs: {a: []}\noptions: {x: 1}\n"
    with pytest.raises(SpecError) as caught:
        validate_spec(text)
    assert [i.json_path for i in caught.value.issues] == ["$.yamltrace", "$.model", "$.outputs.a", "$.options.x"]


# The schema itself.


def _subschemas(node: Any) -> list[dict[str, Any]]:
    found = []
    if isinstance(node, dict):
        found.append(node)
        for value in node.values():
            found.extend(_subschemas(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(_subschemas(value))
    return found


def test_schema_is_valid_draft_2020_12_with_id() -> None:
    schema = load_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"] == SCHEMA_ID
    assert schema["title"] and schema["description"]


def _shared(schema: dict[str, Any], prop: dict[str, Any]) -> dict[str, Any]:
    """A property written as a `$ref` to another mapping's property (an intervention's selector fields
    are the recorder's) is documented where it points."""
    ref = prop.get("$ref", "")
    if "/properties/" not in ref:
        return prop
    node: Any = schema
    for part in ref.removeprefix("#/").split("/"):
        node = node[part]
    return {**node, **prop}


def test_every_property_has_title_description_and_examples() -> None:
    schema = load_schema()
    properties = [
        (name, _shared(schema, prop))
        for node in _subschemas(schema)
        for name, prop in node.get("properties", {}).items()
        if prop is not False  # a rule forbidding a key (`{"properties": {"index": false}, "errorMessage": ...}`)
    ]
    assert len(properties) > 15
    for name, prop in properties:
        assert prop.get("title") and prop.get("description"), name
        assert prop.get("examples"), name


def test_every_object_with_properties_is_closed() -> None:
    for node in _subschemas(load_schema()):
        if "properties" in node and any(prop is not False for prop in node["properties"].values()):
            assert node.get("additionalProperties") is False, node.get("title")


def test_every_example_is_valid_for_its_schema() -> None:
    schema = load_schema()
    validator = jsonschema.Draft202012Validator(schema)
    checked = 0
    for node in _subschemas(schema):
        for example in node.get("examples", []):
            sub = validator.evolve(schema={k: v for k, v in node.items() if k != "$schema"})
            assert list(sub.iter_errors(example)) == [], (node.get("title"), example)
            checked += 1
    assert checked > 20


def test_load_schema_returns_a_fresh_copy() -> None:
    schema = load_schema()
    schema["properties"].clear()
    assert load_schema()["properties"]


def test_packaged_schema_is_identical_to_the_canonical_one() -> None:
    canonical = ROOT / "schemas" / SCHEMA_FILE
    packaged = ROOT / "yamltrace" / "schemas" / SCHEMA_FILE
    assert canonical.read_bytes() == packaged.read_bytes()


def test_built_wheel_contains_the_schema(tmp_path: Path) -> None:
    # Build from a copy of the project files so the shared working tree gets no build/ or egg-info.
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "yamltrace", source / "yamltrace", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(source),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = (tmp_path / "dist").glob("yamltrace-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        packaged = archive.read(f"yamltrace/schemas/{SCHEMA_FILE}")
    assert packaged == (ROOT / "schemas" / SCHEMA_FILE).read_bytes()
