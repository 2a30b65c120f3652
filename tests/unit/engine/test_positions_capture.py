"""A recorder that keeps positions keeps exactly the selection `layers` would route through the same record step."""

from __future__ import annotations

import torch

from yamltrace.engine import OutputRecorder
from yamltrace.examples.tiny import TinyDecoderLayer
from yamltrace.tracing import trace


def test_a_trace_with_positions_equals_the_same_selection_made_through_record(tiny, input_ids) -> None:
    every_layer = tuple(range(tiny.config.num_hidden_layers))  # keeps all, but through record
    spec = {
        "fast": OutputRecorder(TinyDecoderLayer, index=0, positions="-2:"),
        "general": OutputRecorder(TinyDecoderLayer, index=0, positions="-2:", layers=every_layer),
    }
    with trace(tiny, spec) as captures:
        out = tiny(input_ids)
    assert captures.paths("fast") == captures.paths("general")
    assert len(captures["fast"]) == tiny.config.num_hidden_layers
    for a, b in zip(captures["fast"], captures["general"]):
        assert torch.equal(a, b)
    hidden = {"hidden_states": OutputRecorder(TinyDecoderLayer, index=0, positions="-2:")}
    with trace(tiny, hidden) as captures:
        out = tiny(input_ids)
    assert torch.equal(captures["hidden_states"][0], tiny.embed_tokens(input_ids)[:, -2:])
    assert torch.equal(captures["hidden_states"][-1], out.last_hidden_state[:, -2:])
