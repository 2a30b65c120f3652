"""The recorder's fields are defined once (`RECORDER_FIELDS`): `OutputRecorder`, the JSON Schema, the
resolver and `Spec.to_yaml` all follow that table."""

from __future__ import annotations

import dataclasses

import torch
import yaml

from yamltrace import OutputRecorder, load_spec
from yamltrace._recorder_fields import RECORDER_FIELDS
from yamltrace.examples.tiny import TinyDecoderLayer
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


def test_every_field_set_in_a_spec_is_written_back_and_reads_back_equal() -> None:
    recorder = {
        "target": "yamltrace.examples.tiny:TinyDecoderLayer", "index": 2, "layer_name": "layers",
        "capture_initial_hidden_state": False, "num_hidden_layers_key": "n_layer", "layers": [0, -1], "detach": True,
        "to": "cpu", "dtype": "bfloat16", "positions": "-8:", "seq_dim": 2, "optional": True, "mask": "decoder_attention_mask",
    }  # fmt: skip
    spec = load_spec({"yamltrace": 1, "outputs": {"hidden_states": recorder}})
    (read,) = spec.outputs["hidden_states"]
    assert read.dtype is torch.bfloat16 and read.layers == (0, -1)
    assert yaml.safe_load(spec.to_yaml())["outputs"]["hidden_states"] == recorder
    assert load_spec(spec.to_yaml()) == spec


def test_a_field_at_its_default_is_not_written() -> None:
    spec = load_spec(
        {"yamltrace": 1, "outputs": {"hidden_states": {"target": "yamltrace.examples.tiny:TinyDecoderLayer", "seq_dim": 1}}}
    )
    assert spec.to_yaml().rstrip().endswith("hidden_states: yamltrace.examples.tiny:TinyDecoderLayer")
    assert OutputRecorder(TinyDecoderLayer).seq_dim == 1
