"""The recorder's fields are defined once (`RECORDER_FIELDS`): the JSON Schema's recorder properties
and `OutputRecorder`'s fields and defaults are that table."""

from __future__ import annotations

import dataclasses


from yamltrace import OutputRecorder
from yamltrace._recorder_fields import RECORDER_FIELDS
from yamltrace.spec import load_schema


JSON_TYPES = {"string": str, "integer": int, "boolean": bool, "array": list}


def _schema_types(prop: dict) -> set[type]:
    written = prop.get("type", "string" if "$ref" in prop else None)
    return {JSON_TYPES[t] for t in (written if isinstance(written, list) else [written])}


def test_the_schema_recorder_properties_equal_the_table() -> None:
    properties = load_schema()["$defs"]["recorderObject"]["properties"]
    assert set(properties) == {f.key for f in RECORDER_FIELDS}
    assert {key: _schema_types(prop) for key, prop in properties.items()} == {f.key: set(f.types) for f in RECORDER_FIELDS}


def test_output_recorder_fields_and_defaults_are_the_table() -> None:
    fields = dataclasses.fields(OutputRecorder)
    assert [f.name for f in fields] == [f.name for f in RECORDER_FIELDS]
    assert [f.default for f in fields] == [f.default for f in RECORDER_FIELDS]
