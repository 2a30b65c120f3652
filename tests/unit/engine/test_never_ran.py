"""A key whose modules exist but never run in a block's calls records nothing: the block warns, naming
the key, the modules and the likely causes, instead of returning an empty tuple silently."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import yamltrace
from yamltrace import OutputRecorder


class Block(nn.Module):
    def __init__(self, fused: bool) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.drop = nn.Dropout(0.0)
        self.fused = fused

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.proj(x)
        return y if self.fused else self.drop(y)  # the fused path never calls `drop`


class Net(nn.Module):
    def __init__(self, fused: bool) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(fused), Block(fused)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


SPECS = {
    "class": {"probs": nn.Dropout},
    "layer_name": {"probs": OutputRecorder(nn.Module, index=0, layer_name="drop")},
    "class_name": {"probs": OutputRecorder(class_name="drop", index=0)},
}


@pytest.mark.parametrize("spec", SPECS.values(), ids=SPECS.keys())
def test_modules_that_never_ran_warn_naming_the_key_and_the_modules(spec) -> None:
    model = Net(fused=True)
    with pytest.warns(UserWarning, match=r"'probs' \(blocks\.0\.drop, blocks\.1\.drop\): recorded nothing, because") as seen:
        with torch.no_grad(), yamltrace.trace(model, spec) as captures:
            model(torch.ones(1, 4))
    assert captures["probs"] == ()
    message = str(seen[0].message)
    assert "in the block's 1 call(s)" in message and "skip_nnmodule_hook_guards=False" in message


def test_modules_that_ran_or_a_block_without_calls_do_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = Net(fused=False)
        with torch.no_grad(), yamltrace.trace(model, SPECS["class"]) as captures:
            model(torch.ones(1, 4))
        assert len(captures["probs"]) == 2
        with yamltrace.trace(Net(fused=True), SPECS["class"]):
            pass  # no call of the model: nothing to say
