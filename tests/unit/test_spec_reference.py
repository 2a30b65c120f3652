"""docs/spec-reference.md is generated from the spec JSON Schema (tools/gen_spec_reference.py) and kept so."""

from __future__ import annotations

import importlib.util
import json
import re

from helpers import ROOT

_spec = importlib.util.spec_from_file_location("gen_spec_reference", ROOT / "tools" / "gen_spec_reference.py")
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)

SCHEMA = json.loads(gen.SCHEMA.read_text(encoding="utf-8"))


def _objects(node, found):
    """Every mapping with listed keys in the schema, wherever it is nested (a rule that only forbids keys,
    `{"properties": {"index": false}, ...}`, lists none)."""
    if isinstance(node, dict):
        if isinstance(node.get("properties"), dict) and any(v is not False for v in node["properties"].values()):
            found.append(node)
        for value in node.values():
            _objects(value, found)
    elif isinstance(node, list):
        for value in node:
            _objects(value, found)
    return found


def test_the_committed_page_is_the_generated_one() -> None:
    committed = (ROOT / "docs" / "spec-reference.md").read_text(encoding="utf-8")
    assert committed == gen.generate(), "docs/spec-reference.md is stale: run python tools/gen_spec_reference.py"


def test_every_key_of_every_mapping_has_a_section_with_its_type() -> None:
    page = gen.generate()
    headings = re.findall(r"^### `([^`]+)`$", page, flags=re.MULTILINE)
    keys = [name for node in _objects(SCHEMA, []) for name in node["properties"]]
    assert sorted(headings) == sorted(keys)
    assert page.count("\n- type: ") >= len(keys)


def test_defaults_come_from_the_schema() -> None:
    page = gen.generate()
    assert "| [`index`](#keys-recorderobject-index) | integer | no | 0 for keys containing hidden_states, else 1 |" in page
    assert "| [`seq_dim`](#keys-recorderobject-seq-dim) | integer | no | 1 ([batch, seq, ...]) |" in page
    schema = json.loads(json.dumps(SCHEMA))
    schema["$defs"]["recorderObject"]["properties"]["index"]["default"] = 7
    assert "| integer | no | `7` |" in gen.Reference(schema).render()


def test_examples_are_written_as_yaml_one_would_type() -> None:
    assert gen.flow({"a": [0, -1], "b": True, "c": "^x\\d$", "d": "on"}) == '{a: [0, -1], b: true, c: "^x\\\\d$", d: "on"}'


def test_the_check_mode_fails_on_a_stale_page(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(gen, "PAGE", tmp_path / "spec-reference.md")
    (tmp_path / "spec-reference.md").write_text("old\n", encoding="utf-8")
    assert gen.main(["--check"]) == 1
    assert gen.main([]) == 0 and gen.main(["--check"]) == 0
