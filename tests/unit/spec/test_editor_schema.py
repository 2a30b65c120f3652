"""The schema resolves offline and its messages are in the form editors show: `yamltrace schema --path`,
shipped specs' modelines naming the packaged file, `to_yaml` naming a file, and every custom message a
plain string (yaml-language-server shows a mapping or a `{instance}` placeholder raw)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import yamltrace.specs
from yamltrace import load_spec
from yamltrace.cli import main
from yamltrace.spec import SCHEMA_FILE, load_schema, schema_path

MODELINE = "# yaml-language-server: $schema="


def _nodes(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, dict):
        return [node, *(n for value in node.values() for n in _nodes(value))]
    return [n for value in node for n in _nodes(value)] if isinstance(node, list) else []


def test_every_custom_message_is_a_plain_string_editors_can_show() -> None:
    messages = 0
    for node in _nodes(load_schema()):
        for keyword in ("errorMessage", "patternErrorMessage"):
            if keyword in node:
                assert isinstance(node[keyword], str) and "{" not in node[keyword], node[keyword]
                messages += 1
        if "patternErrorMessage" in node:
            assert "pattern" in node, node["patternErrorMessage"]
    assert messages >= 20


def test_schema_path_prints_the_installed_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "--path"]) == 0
    printed = capsys.readouterr().out
    assert printed == schema_path() + "\n"
    assert Path(printed.strip()).name == SCHEMA_FILE
    assert json.loads(Path(printed.strip()).read_text(encoding="utf-8")) == load_schema()


@pytest.mark.parametrize("name", yamltrace.specs.list())
def test_a_shipped_spec_names_the_packaged_schema_file(name: str) -> None:
    path = yamltrace.specs.path(name)
    first = path.read_text(encoding="utf-8").splitlines()[0]
    assert first == f"{MODELINE}../schemas/{SCHEMA_FILE}"
    assert (path.parent / first.removeprefix(MODELINE)).resolve() == Path(schema_path()).resolve()


def test_to_yaml_names_the_schema_file_beside_it_or_the_one_given() -> None:
    spec = load_spec("yamltrace: 1\nimports: [yamltrace.examples.tiny]\noutputs:\n  hidden_states: TinyDecoderLayer\n")
    assert spec.to_yaml().splitlines()[0] == MODELINE + SCHEMA_FILE  # beside it: the same text on every machine
    first = spec.to_yaml(schema=schema_path()).splitlines()[0]
    assert first == MODELINE + schema_path() and Path(first.removeprefix(MODELINE)).is_file()
    assert spec.to_yaml(schema="").startswith("yamltrace: 1\n")
    assert load_spec(spec.to_yaml()) == spec
