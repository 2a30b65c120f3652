"""A key whose modules exist but never run in a block's calls records nothing: the block says so (a
`NeverRanWarning`), naming the key, the modules and the likely causes, instead of returning an empty
tuple silently. An intervention whose modules never ran edited nothing: an error under `strict=True`."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn

import yamltrace
from yamltrace import CaptureError, NeverRanWarning, OutputRecorder
from yamltrace.tracing import stepwise


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
@pytest.mark.parametrize("strict", [True, False])
def test_modules_that_never_ran_warn_naming_the_key_and_the_modules(spec, strict) -> None:
    model = Net(fused=True)
    with pytest.warns(NeverRanWarning, match=r"'probs' \(blocks\.0\.drop, blocks\.1\.drop\): recorded nothing, because") as seen:
        with torch.no_grad(), yamltrace.trace(model, spec, strict=strict) as captures:
            model(torch.ones(1, 4))
    assert captures["probs"] == ()
    message = str(seen[0].message)
    assert "in the block's 1 call(s)" in message and "skip_nnmodule_hook_guards=False" in message


def test_the_warning_is_an_error_where_the_filter_says_so() -> None:
    """What a CI run that must not pass with an empty capture does: escalate the category."""
    model = Net(fused=True)
    model._can_record_outputs = {"probs": nn.Dropout}  # the model's own map, as `trace(model)` reads it
    with warnings.catch_warnings():
        warnings.simplefilter("error", NeverRanWarning)
        with pytest.raises(NeverRanWarning, match="'probs' .*recorded nothing"):
            with torch.no_grad(), yamltrace.trace(model):
                model(torch.ones(1, 4))
    assert not model.blocks[0].drop._forward_hooks and not model._forward_hooks  # nothing left installed


def test_only_the_keys_that_never_ran_are_named() -> None:
    model = Net(fused=True)
    spec = {"probs": nn.Dropout, "projections": nn.Linear}
    with pytest.warns(NeverRanWarning) as seen:
        with torch.no_grad(), yamltrace.trace(model, spec) as captures:
            model(torch.ones(1, 4))
    assert "'probs'" in str(seen[0].message) and "'projections'" not in str(seen[0].message)
    assert len(captures["projections"]) == 2


def test_modules_that_ran_do_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = Net(fused=False)
        with torch.no_grad(), yamltrace.trace(model, SPECS["class"]) as captures:
            model(torch.ones(1, 4))
        assert len(captures["probs"]) == 2


@pytest.mark.parametrize("calls", ["none", "a module inside", "a copy", "its forward"])
def test_a_block_without_a_call_of_the_traced_model_says_it_recorded_nothing(calls: str) -> None:
    model = Net(fused=False)
    other = {"none": None, "a module inside": model.blocks[0], "a copy": copy.deepcopy(model), "its forward": model.forward}[
        calls
    ]
    with pytest.warns(NeverRanWarning, match=r"without a call of the Net it traces, so 'probs' recorded nothing") as seen:
        with torch.no_grad(), yamltrace.trace(model, SPECS["class"]) as captures:
            if other is not None:
                other(torch.ones(1, 4))
    assert len(seen) == 1 and seen[0].filename == __file__
    assert captures["probs"] == ()


def test_a_stepwise_block_says_when_a_take_follows_no_call_and_not_when_its_loop_ran_none() -> None:
    model = Net(fused=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with torch.no_grad(), stepwise(model, SPECS["class"]) as steps:
            model(torch.ones(1, 4))
            assert len(steps.take()["probs"]) == 2  # (its steps taken: the block still called the model)
        with stepwise(model, SPECS["class"]):
            pass  # a loop over no batches
    with torch.no_grad(), stepwise(model, SPECS["class"]) as steps:
        model.blocks[0](torch.ones(1, 4))
        with pytest.warns(NeverRanWarning, match="no call of the Net it traces finished since the last take") as seen:
            assert steps.take()["probs"] == ()
    assert seen[0].filename == __file__


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


def test_interventions_that_ran_or_a_trace_block_recording_nothing_without_calls_say_nothing() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = Net(fused=False)
        with torch.no_grad(), yamltrace.intervene(model, _edits(nn.Dropout)):
            assert torch.equal(model(torch.ones(1, 4)), torch.zeros(1, 4))
        with yamltrace.trace(Net(fused=True), _edits(nn.Dropout)):
            pass


@pytest.mark.parametrize("calls", ["none", "a copy"])
def test_an_intervene_block_in_which_nothing_was_edited_says_so(calls: str) -> None:
    model = Net(fused=False)
    other = copy.deepcopy(model) if calls == "a copy" else None
    with pytest.warns(
        NeverRanWarning, match=r"intervene: no intervention edited anything in the block \('zero_dropout'\)"
    ) as seen:
        with torch.no_grad(), yamltrace.intervene(model, _edits(nn.Dropout)):
            if other is not None:
                assert not torch.equal(other(torch.ones(1, 4)), torch.zeros(1, 4))  # (the copy is not edited)
    assert len(seen) == 1 and seen[0].filename == __file__
