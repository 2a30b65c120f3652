"""`extends: builtin:NAME` extends a shipped spec from any folder (a relative base stays confined)."""

from __future__ import annotations

from pathlib import Path

import pytest

from yamltrace import SpecError, load_spec, specs, validate_spec
from yamltrace.spec import read_spec_document


def test_a_file_anywhere_extends_a_shipped_spec(tmp_path: Path) -> None:
    spec = tmp_path / "mine.yaml"
    spec.write_text("yamltrace: 1\nextends: builtin:llama\noutputs:\n  mlp: {target: LlamaMLP, index: 0}\n")
    base = read_spec_document(specs.path("llama"))
    document = validate_spec(spec)
    assert set(document.data["outputs"]) == set(base.data["outputs"]) | {"mlp"}
    assert document.data["imports"] == base.data["imports"]
    loaded = load_spec(spec, trust_imports=True)
    assert loaded.outputs["hidden_states"] == load_spec("builtin:llama").outputs["hidden_states"]
    assert loaded.outputs["mlp"][0].target_class.__name__ == "LlamaMLP"


def test_text_extends_a_shipped_spec() -> None:
    document = validate_spec("yamltrace: 1\nextends: builtin:gpt2\n")
    assert document.data["outputs"] == read_spec_document(specs.path("gpt2")).data["outputs"]


def test_an_unknown_shipped_spec_is_located_at_extends_with_the_closest_name(tmp_path: Path) -> None:
    spec = tmp_path / "mine.yaml"
    spec.write_text("yamltrace: 1\nextends: builtin:lama\n")
    with pytest.raises(SpecError) as raised:
        validate_spec(spec)
    (issue,) = raised.value.issues
    assert (issue.json_path, issue.line) == ("$.extends", 2)
    assert "no shipped spec 'lama'; did you mean 'llama'?" in issue.message


@pytest.mark.parametrize("ref", ["builtin:../llama", "builtin:/etc/passwd", "builtin:"])
def test_a_builtin_name_is_a_name_not_a_path(ref: str, tmp_path: Path) -> None:
    spec = tmp_path / "mine.yaml"
    spec.write_text(f"yamltrace: 1\nextends: '{ref}'\n")
    with pytest.raises(SpecError, match="no shipped spec"):
        validate_spec(spec)
