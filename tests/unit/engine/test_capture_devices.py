"""A recorder's `to:` device must exist: checked when the capture starts, with a clear error (issue #12, item 10)."""

from __future__ import annotations

import pytest
import torch

from yamltrace import trace
from yamltrace.errors import CaptureError
from yamltrace.examples.tiny import TinyDecoderLayer, TinyModel
from yamltrace.spec import load_spec


def test_a_missing_cuda_device_is_named_when_the_capture_starts(
    tiny: TinyModel, input_ids: torch.Tensor, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = load_spec(
        {"yamltrace": 1, "outputs": {"hidden_states": {"target": "yamltrace.examples.tiny:TinyDecoderLayer", "to": "cuda"}}}
    )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(CaptureError, match=r"output 'hidden_states'.*moves captures to 'cuda', which this machine does not have"):
        with trace(tiny, spec):
            tiny(input_ids)


def test_an_available_device_captures(tiny: TinyModel, input_ids: torch.Tensor) -> None:
    spec = load_spec(
        {"yamltrace": 1, "outputs": {"hidden_states": {"target": "yamltrace.examples.tiny:TinyDecoderLayer", "to": "cpu"}}}
    )
    with trace(tiny, spec) as captured:
        tiny(input_ids)
    assert len(captured["hidden_states"]) == sum(isinstance(m, TinyDecoderLayer) for m in tiny.modules()) + 1
