"""The recorder's fields are defined once (`RECORDER_FIELDS`): `OutputRecorder`, the JSON Schema, the
resolver and `Spec.to_yaml` all follow that table."""

from __future__ import annotations


import torch
import yaml

from yamltrace import OutputRecorder, load_spec
from yamltrace.examples.tiny import TinyDecoderLayer


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
