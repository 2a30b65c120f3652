"""Helpers of the spec tests: spec text and files with interventions, and the messages a refused spec gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from yamltrace import SpecError, load_spec, validate_spec

LAYER = "yamltrace.examples.tiny:TinyDecoderLayer"


def spec_text(*entries: str) -> str:
    return "yamltrace: 1\ninterventions:\n" + "".join(f"  {entry}\n" for entry in entries)


def write(folder: Path, *entries: str, name: str = "spec.yaml") -> Path:
    path = folder / name
    path.write_text(spec_text(*entries), encoding="utf-8")
    return path


def issues(source: object) -> list[str]:
    with pytest.raises(SpecError) as caught:
        load_spec(source)  # type: ignore[arg-type]
    return [issue.render() for issue in caught.value.issues]


def tensor_spec(folder: Path, reference: str) -> Path:
    return write(folder, f"steer: {{target: {LAYER}, add: {{tensor: '{reference}'}}}}")


def refused(source, *, load: bool = True, **kwargs) -> str:
    """The SpecError message both `validate_spec` and `load_spec` give `source` (they must agree)."""
    with pytest.raises(SpecError) as validated:
        validate_spec(source)
    if load:
        with pytest.raises(SpecError) as loaded:
            load_spec(source, **kwargs)
        assert {i.json_path for i in validated.value.issues} <= {i.json_path for i in loaded.value.issues}
    return str(validated.value)


def spec(body: str) -> str:
    return "yamltrace: 1\n" + body
