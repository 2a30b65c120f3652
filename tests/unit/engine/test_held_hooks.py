"""Hooks held between consecutive capturing forwards (docs/capture.md, "Hooks between forwards")."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest
import torch
from torch import nn

from helpers import assert_same, hook_count
from yamltrace.capture import capture_outputs
from yamltrace.engine import OutputRecorder, normalized_tasks, plan_hooks, release_hooks
from yamltrace.engine import held_hooks
from yamltrace.modeling import BaseModelOutput, Config, PreTrainedModel

DIM = 4
FLAGS = {"output_hidden_states": True, "output_attentions": True}


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.Linear(DIM, DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x + self.attn(x))


class OtherBlock(Block):
    """A `Block` subclass the map does not record as a hidden state."""


class Held(PreTrainedModel):
    _can_record_outputs = {"hidden_states": Block, "attentions": OutputRecorder(nn.Linear, index=0, layer_name="attn")}

    def __init__(self) -> None:
        super().__init__(Config(num_hidden_layers=3))
        self.layers = nn.ModuleList(Block() for _ in range(3))

    @capture_outputs(tie_last_hidden_states=False)
    def forward(self, x: torch.Tensor, **kwargs: Any) -> BaseModelOutput:
        for layer in self.layers:
            x = layer(x)
        return BaseModelOutput(last_hidden_state=x)


def expected(model: Held, x: torch.Tensor) -> tuple[list, list]:
    """Hidden states and attention outputs of `model`, computed by calling its submodules by hand."""
    states, attentions = [x], []
    for layer in model.layers:
        attentions.append(layer.attn(states[-1]))
        states.append(layer(states[-1]))
    return states, attentions


@pytest.fixture
def model() -> Held:
    torch.manual_seed(0)
    return Held().eval()


@pytest.fixture
def x() -> torch.Tensor:
    return torch.randn(2, DIM, generator=torch.Generator().manual_seed(1))


def test_consecutive_capturing_forwards_reuse_the_hooks(model, x) -> None:
    first = model(x, **FLAGS)
    hooks = [list(m._forward_hooks.values()) for m in model.modules()]
    second = model(x, **FLAGS)
    assert held_hooks(model)
    assert [list(m._forward_hooks.values()) for m in model.modules()] == hooks  # the same hooks, kept
    states, attentions = expected(model, x)
    for out in (first, second):
        assert_same(out.hidden_states, states)
        assert_same(out.attentions, attentions)
    assert first.hidden_states[1] is not second.hidden_states[1]  # each forward its own captures


def test_a_forward_without_capture_removes_everything(model, x) -> None:
    model(x, **FLAGS)
    assert hook_count(model) > 0
    out = model(x)
    assert hook_count(model) == 0 and not held_hooks(model)
    assert out.hidden_states is None
    model(x, **FLAGS)
    release_hooks(model)
    release_hooks(model)  # idempotent
    assert hook_count(model) == 0 and not held_hooks(model)


def test_held_hooks_record_nothing_between_forwards(model, x) -> None:
    out = model(x, **FLAGS)
    for layer in model.layers:  # calls of hooked modules outside a capturing forward
        layer(x)
    assert len(out.hidden_states) == 4 and len(out.attentions) == 3


def test_other_flags_replace_the_held_hooks(model, x) -> None:
    model(x, **FLAGS)
    out = model(x, output_attentions=True)
    assert out.hidden_states is None
    assert_same(out.attentions, expected(model, x)[1])
    assert sum(bool(m._forward_hooks) for m in model.modules()) == 3  # the attention layers only


@pytest.mark.parametrize("how", ["class forward", "wrapper", "functools.wraps over the held forward"])
def test_an_instance_forward_set_between_capturing_forwards_is_followed(model, x, how) -> None:
    """A `forward` set on a hooked instance while hooks are held would bypass its listener: the next
    capturing forward installs over it, so that layer is still recorded (and still called through
    the new forward)."""
    import functools
    import types

    model(x, **FLAGS)
    layer = model.layers[1]
    calls: list[int] = []
    if how == "class forward":
        layer.forward = types.MethodType(Block.forward, layer)
    else:
        inner = layer.forward if how.startswith("functools") else types.MethodType(Block.forward, layer)

        @functools.wraps(inner)
        def counted(*args: Any, **kwargs: Any) -> Any:
            calls.append(1)
            return inner(*args, **kwargs)

        if not how.startswith("functools"):
            del counted.__wrapped__  # a plain wrapper, not over the held forward
        layer.forward = counted
    own = layer.__dict__["forward"]
    out = model(x, **FLAGS)
    states, attentions = expected(model, x)
    assert len(out.hidden_states) == 4 and len(out.attentions) == 3
    assert_same(out.hidden_states, states)
    assert_same(out.attentions, attentions)
    assert calls == ([] if how == "class forward" else [1, 1])  # the forward and `expected`
    model(x)
    assert layer.__dict__["forward"] is own and hook_count(model) == 1  # the user's own forward, only


@pytest.mark.parametrize("change", ["replace", "delete", "append", "class"])
def test_structure_changes_between_capturing_forwards_are_followed(model, x, change) -> None:
    model(x, **FLAGS)
    if change == "replace":
        model.layers[1] = Block()
    elif change == "delete":
        del model.layers[1]
    elif change == "append":
        model.layers.append(Block())
    else:
        model.layers[1].__class__ = OtherBlock
    out = model(x, **FLAGS)
    states, attentions = expected(model, x)
    if change == "class":  # still a Block (a subclass): recorded as before
        assert len(out.hidden_states) == 4
    assert_same(out.hidden_states, states)
    assert_same(out.attentions, attentions)
    model(x)
    assert hook_count(model) == 0


@pytest.mark.slow  # compiles
def test_copies_state_dict_and_compile_are_unaffected(model, x) -> None:
    reference = model(x, **FLAGS)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    assert held_hooks(model)
    assert model.state_dict().keys() == state.keys()
    for twin in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        assert not held_hooks(twin)
        plain = twin(x)
        assert_same(plain.last_hidden_state, reference.last_hidden_state)
        captured = twin(x, **FLAGS)
        assert_same(captured.hidden_states, expected(twin, x)[0])
        twin(x)
        assert not held_hooks(twin)
    # The original still records into its own outputs only.
    again = model(x, **FLAGS)
    assert_same(again.hidden_states, reference.hidden_states)
    compiled = torch.compile(model, backend="eager")
    assert_same(compiled(x).last_hidden_state, reference.last_hidden_state)  # held hooks are inert there
    assert held_hooks(model)  # a compiled forward changes no hooks: release explicitly
    release_hooks(model)
    assert hook_count(model) == 0


def test_collected_model_takes_its_hooks_along(x) -> None:
    import gc
    import weakref

    model = Held().eval()
    layer = model.layers[0]
    model(x, **FLAGS)
    assert layer._forward_hooks
    ref = weakref.ref(model)
    del model
    gc.collect()
    assert ref() is None
    # Released at the next call into the held-hooks registry (never from inside the collector).
    assert not held_hooks(layer)
    assert not layer._forward_hooks


class NotABlock(nn.Module):
    """Not a `Block`: assigned as a layer's class, the layer is no longer recorded."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x + self.attn(x))


def _add_to_a_leaf_directly(model: Held) -> None:
    model.layers[0].attn._modules["extra"] = nn.Identity()  # a direct edit, no registration hook


@pytest.mark.parametrize(
    "change, holds",
    [
        (lambda model: None, True),
        (lambda model: model.layers[0].attn.train(), True),  # not a structure change
        (lambda model: delattr(model.layers[2], "attn"), False),  # a container shrinks
        (lambda model: setattr(model.layers[0].attn, "extra", nn.Identity()), False),  # registration hook
        (_add_to_a_leaf_directly, False),  # a leaf's `_modules` is no longer empty
        (lambda model: setattr(model.layers[1], "__class__", NotABlock), False),  # a container's class
        (lambda model: setattr(model.layers[1].attn, "__class__", nn.Identity), False),  # a leaf's class
    ],
    ids=["unchanged", "mode", "delete", "add", "add-directly", "container-class", "leaf-class"],
)
def test_the_guard_of_held_hooks_sees_every_structure_change(model, change, holds: bool) -> None:
    _, guard = plan_hooks(model, normalized_tasks(Held._can_record_outputs), nested_maps=True, guarded=True)
    assert guard.holds(model)
    change(model)
    assert guard.holds(model) is holds


def test_a_layer_whose_class_changes_is_no_longer_recorded(model, x) -> None:
    model(x, **FLAGS)
    model.layers[1].__class__ = NotABlock
    out = model(x, **FLAGS)
    states, attentions = expected(model, x)
    assert_same(out.hidden_states, [states[0], states[1], states[3]])  # layer 1 is not a Block now
    assert_same(out.attentions, attentions)
