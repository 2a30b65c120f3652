"""A key whose modules exist but never run in a block's calls records nothing: the block says so, naming
the key, the modules and the likely causes, instead of returning an empty tuple silently — an error
for a recorder of an explicit spec under `strict=True` (the default), else a warning."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import yamltrace
from yamltrace import CaptureError, OutputRecorder


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
def test_modules_that_never_ran_are_an_error_naming_the_key_and_the_modules(spec) -> None:
    model = Net(fused=True)
    with pytest.raises(CaptureError, match=r"'probs' \(blocks\.0\.drop, blocks\.1\.drop\): recorded nothing, because") as seen:
        with torch.no_grad(), yamltrace.trace(model, spec):
            model(torch.ones(1, 4))
    message = str(seen.value)
    assert "in the block's 1 call(s)" in message and "skip_nnmodule_hook_guards=False" in message
    assert "strict=False" in message and "optional: true" in message


@pytest.mark.parametrize("spec", SPECS.values(), ids=SPECS.keys())
def test_with_strict_false_they_warn(spec) -> None:
    model = Net(fused=True)
    with pytest.warns(UserWarning, match=r"'probs' \(blocks\.0\.drop, blocks\.1\.drop\): recorded nothing, because") as seen:
        with torch.no_grad(), yamltrace.trace(model, spec, strict=False) as captures:
            model(torch.ones(1, 4))
    assert captures["probs"] == ()
    assert "in the block's 1 call(s)" in str(seen[0].message)


def test_an_optional_recorder_or_the_models_own_map_warns() -> None:
    model = Net(fused=True)
    optional = {"probs": OutputRecorder(nn.Dropout, optional=True)}
    with pytest.warns(UserWarning, match="'probs' .*recorded nothing"):
        with torch.no_grad(), yamltrace.trace(model, optional) as captures:
            model(torch.ones(1, 4))
    assert captures["probs"] == ()
    model._can_record_outputs = {"probs": nn.Dropout}  # no explicit spec: the model's own map
    with pytest.warns(UserWarning, match="'probs' .*recorded nothing"):
        with torch.no_grad(), yamltrace.trace(model) as captures:
            model(torch.ones(1, 4))
    assert captures["probs"] == ()


def test_only_the_keys_that_never_ran_are_named() -> None:
    model = Net(fused=True)
    spec = {"probs": nn.Dropout, "projections": nn.Linear}
    with pytest.raises(CaptureError) as seen:
        with torch.no_grad(), yamltrace.trace(model, spec):
            model(torch.ones(1, 4))
    assert "'probs'" in str(seen.value) and "'projections'" not in str(seen.value)


def test_modules_that_ran_or_a_block_without_calls_do_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = Net(fused=False)
        with torch.no_grad(), yamltrace.trace(model, SPECS["class"]) as captures:
            model(torch.ones(1, 4))
        assert len(captures["probs"]) == 2
        with yamltrace.trace(Net(fused=True), SPECS["class"]):
            pass  # no call of the model: nothing to say


def _edits(*targets: type[nn.Module]) -> yamltrace.Spec:
    from yamltrace.engine import Intervention

    return yamltrace.Spec(
        outputs={}, interventions=[Intervention(f"zero_{t.__name__.lower()}", OutputRecorder(t), "zero") for t in targets]
    )


def test_an_intervention_whose_modules_never_ran_is_an_error_naming_it() -> None:
    model = Net(fused=True)
    with pytest.raises(CaptureError, match=r"'zero_dropout' \(blocks\.0\.drop, blocks\.1\.drop\): edited nothing") as seen:
        with torch.no_grad(), yamltrace.intervene(model, _edits(nn.Dropout, nn.Linear)):
            out = model(torch.ones(1, 4))
    assert "'zero_linear'" not in str(seen.value) and "strict=False" in str(seen.value)
    assert torch.equal(out, torch.zeros(1, 4))  # the linear edit applied
    with pytest.warns(UserWarning, match="intervene: 'zero_dropout' .*edited nothing"):
        with torch.no_grad(), yamltrace.intervene(model, _edits(nn.Dropout, nn.Linear), strict=False):
            model(torch.ones(1, 4))


def test_a_trace_whose_interventions_never_ran_says_so() -> None:
    model = Net(fused=True)
    spec = _edits(nn.Dropout)
    with pytest.raises(CaptureError, match="'zero_dropout' .*edited nothing"):
        with torch.no_grad(), yamltrace.trace(model, spec):
            model(torch.ones(1, 4))
    with pytest.warns(UserWarning, match="'zero_dropout' .*edited nothing"):
        with torch.no_grad(), yamltrace.trace(model, spec, strict=False):
            model(torch.ones(1, 4))


def test_interventions_that_ran_or_blocks_without_calls_say_nothing() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = Net(fused=False)
        with torch.no_grad(), yamltrace.intervene(model, _edits(nn.Dropout)):
            assert torch.equal(model(torch.ones(1, 4)), torch.zeros(1, 4))
        with yamltrace.intervene(Net(fused=True), _edits(nn.Dropout)):
            pass
        with yamltrace.trace(Net(fused=True), _edits(nn.Dropout)):
            pass
