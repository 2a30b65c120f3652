"""Every recorder value that loads also runs: at the bounds of each field, a traced forward either
captures or stops with a located yamltrace error (never a ValueError or RuntimeError from inside torch)."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch

from yamltrace import YamltraceError, load_spec, trace
from yamltrace._recorder_fields import MAX_POSITION, MAX_RECORDER_INDEX, MAX_SEQ_DIM
from yamltrace.examples.tiny import TinyConfig, TinyModel

EDGES: list[dict[str, Any]] = [
    {"index": MAX_RECORDER_INDEX}, {"index": -MAX_RECORDER_INDEX},
    {"layers": [MAX_RECORDER_INDEX, -MAX_RECORDER_INDEX]},
    {"input": MAX_RECORDER_INDEX}, {"input": "not_an_argument"},
    {"seq_dim": MAX_SEQ_DIM - 1}, {"seq_dim": -MAX_SEQ_DIM, "positions": [0]},
    {"positions": [MAX_POSITION]}, {"positions": [-MAX_POSITION, MAX_POSITION]},
    {"positions": f"{-MAX_POSITION}:{MAX_POSITION}:{MAX_POSITION}"}, {"positions": f"{MAX_POSITION}:"},
    {"positions": ":"}, {"positions": "0:0"}, {"positions": "::1"},
    {"layer_name": ".x"}, {"num_hidden_layers_key": "hidden_size", "layers": [-1]},
    {"dtype": "float64", "to": "cpu", "detach": True},
]  # fmt: skip


@pytest.mark.parametrize("fields", EDGES, ids=lambda f: ",".join(f"{k}={v}" for k, v in f.items()))
def test_a_value_that_loads_runs_or_stops_with_a_located_error(fields: dict[str, Any]) -> None:
    recorder = {"target": "yamltrace.examples.tiny:TinyDecoderLayer", **fields}
    spec = load_spec({"yamltrace": 1, "outputs": {"h": recorder}})
    model = TinyModel(TinyConfig()).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a lenient trace warns for a recorder that matches nothing
        try:
            with torch.no_grad(), trace(model, spec, strict=False) as captured:
                model(torch.tensor([[1, 2, 3, 4]]))
        except YamltraceError as e:
            assert "h" in str(e)  # names the output key it comes from
            return
    assert set(captured) == {"h"}
