"""`layers:` naming a layer the model does not have is an error when a `trace` block starts, before the
forward runs, naming the key, the index and the valid range (never `None` placeholders)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import yamltrace
from helpers import hook_count
from yamltrace import OutputRecorder
from yamltrace.errors import CaptureError, YamltraceError
from yamltrace.examples.tiny import TinyConfig, TinyDecoderLayer, TinyModel


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def test_a_plain_module_with_a_layer_it_does_not_have() -> None:
    model = Net()
    with pytest.raises(CaptureError, match=r"output 'out': layers \[5\] out of range: .*valid indices -2\.\.1\)"):
        with yamltrace.trace(model, {"out": OutputRecorder(Block, index=0, layers=[5])}):
            raise AssertionError("the block must not start")
    assert hook_count(model) == 0
    assert issubclass(CaptureError, YamltraceError)


@pytest.mark.parametrize("layers", [[40], [-4], [0, 3]])
def test_a_configured_model_counts_from_its_config(layers) -> None:
    model = TinyModel(TinyConfig(num_hidden_layers=2))  # 3 hidden states with the initial one
    spec = {"hidden_states": OutputRecorder(TinyDecoderLayer, index=0, layers=tuple(layers))}
    with pytest.raises(CaptureError, match=r"output 'hidden_states': layers \[.*\] out of range: .*\(valid indices -3\.\.2\)"):
        with yamltrace.trace(model, spec):
            pass
    assert hook_count(model) == 0


def test_layers_in_range_still_select() -> None:
    model = TinyModel(TinyConfig(num_hidden_layers=2))
    spec = {"hidden_states": OutputRecorder(TinyDecoderLayer, index=0, layers=(-1, 0))}
    with torch.no_grad(), yamltrace.trace(model, spec) as captures:
        model(torch.tensor([[1, 2, 3]]))
    assert [value is None for value in captures["hidden_states"]] == [False, True, False]


@pytest.mark.parametrize("layers", [(0, 40), (-5,)], ids=["past the end", "before the start"])
def test_an_intervention_with_a_layer_the_model_does_not_have_is_a_located_error(layers) -> None:
    from yamltrace.engine import Intervention
    from yamltrace.errors import SpecError

    model = TinyModel(TinyConfig(num_hidden_layers=4)).eval()
    spec = yamltrace.Spec(
        outputs={}, interventions=[Intervention("ablate", OutputRecorder(TinyDecoderLayer, layers=layers), "zero")]
    )
    before = hook_count(model)
    for run in (
        lambda: yamltrace.intervene(model, spec).__enter__(),
        lambda: yamltrace.apply_interventions(model, spec),
        lambda: yamltrace.trace(model, spec).__enter__(),
    ):
        with pytest.raises(SpecError, match=r"\$\.interventions\.ablate: intervention 'ablate': layers? .* out of range") as seen:
            run()
        assert "valid indices are -4..3" in str(seen.value)
        assert hook_count(model) == before  # nothing installed
