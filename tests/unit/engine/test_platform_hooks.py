"""Captures and edits are torch hooks: what pops or replaces a module's instance `forward` (transformers'
kernelize on `train()` / `eval()`, accelerate's `add_hook_to_module` and `cpu_offload`) leaves them in
place, and any change of a model's structure between blocks is followed."""

from __future__ import annotations

import types
from typing import Any

import pytest
import torch
from torch import nn

import yamltrace
from helpers import assert_same, hook_count
from yamltrace.examples.tiny import TinyConfig, TinyDecoderLayer, TinyModel

IDS = torch.tensor([[3, 5, 7, 9, 11]])
ZERO_NORM = {"yamltrace": 1, "interventions": {"z": {"class_name": "norm", "zero": True}}}


@pytest.fixture
def model() -> TinyModel:
    torch.manual_seed(0)
    return TinyModel(TinyConfig(num_hidden_layers=3)).eval()


def _plain(model: nn.Module, targets: list[nn.Module]) -> list[Any]:
    """What plain forward hooks on `targets` record in one forward (the reference)."""
    seen: list[Any] = []
    handles = [m.register_forward_hook(lambda _, args, output: seen.append(output)) for m in targets]
    try:
        with torch.no_grad():
            model(IDS)
    finally:
        for handle in handles:
            handle.remove()
    return seen


def _pop_instance_forwards(model: nn.Module) -> None:
    """What kernelize does on `train()` / `eval()`: set, then pop, each module's instance `forward`."""
    for module in model.modules():
        module.forward = types.MethodType(type(module).forward, module)
    for module in model.modules():
        module.__dict__.pop("forward", None)


def test_captures_survive_instance_forwards_popped_inside_a_block(model) -> None:
    norms = [m for m in model.modules() if type(m).__name__ == "RMSNorm"]
    with torch.no_grad(), yamltrace.trace(model, {"norms": type(norms[0])}) as captures:
        model(IDS)
        _pop_instance_forwards(model)
        model.train()
        model.eval()
        model(IDS)
    assert len(captures["norms"]) == 2 * len(norms)
    assert_same(captures.steps[1]["norms"], tuple(_plain(model, norms)))
    assert hook_count(model) == 0


def test_edits_survive_instance_forwards_popped_while_applied(model) -> None:
    with torch.no_grad():
        plain = model(IDS).last_hidden_state
        handle = yamltrace.apply_interventions(model, ZERO_NORM)
        _pop_instance_forwards(model)
        assert torch.equal(model(IDS).last_hidden_state, torch.zeros_like(plain))
        handle.remove()
        assert torch.equal(model(IDS).last_hidden_state, plain)
    assert hook_count(model) == 0


def test_captures_and_edits_on_modules_accelerate_hooks(model) -> None:
    accelerate_hooks = pytest.importorskip("accelerate.hooks")
    layers = list(model.layers)
    expected = _plain(model, layers)
    for layer in layers:
        accelerate_hooks.add_hook_to_module(layer, accelerate_hooks.ModelHook())  # rewrites `layer.forward`
    with torch.no_grad(), yamltrace.trace(model, {"hidden_states": TinyDecoderLayer}) as captures:
        model(IDS)
    assert_same(captures["hidden_states"][1:-1], tuple(expected)[:-1])
    with torch.no_grad(), yamltrace.intervene(model, ZERO_NORM):
        assert torch.equal(model(IDS).last_hidden_state, torch.zeros_like(expected[-1][:, :, :1]).expand_as(expected[-1]))
    # Removing accelerate's hook (which pops `forward` again) while ours are on keeps ours.
    with torch.no_grad(), yamltrace.trace(model, {"hidden_states": TinyDecoderLayer}) as captures:
        for layer in layers:
            accelerate_hooks.remove_hook_from_module(layer)
        model(IDS)
    assert_same(captures["hidden_states"][1:-1], tuple(expected)[:-1])
    # (accelerate leaves an instance `forward` behind; no torch hook is left)
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


def test_captures_of_a_cpu_offloaded_model(model) -> None:
    accelerate = pytest.importorskip("accelerate")
    layers = list(model.layers)
    expected = _plain(model, layers)
    accelerate.cpu_offload(model, execution_device=torch.device("cpu"))
    with torch.no_grad(), yamltrace.trace(model, {"hidden_states": TinyDecoderLayer}) as captures:
        model(IDS)
    assert len(captures["hidden_states"]) == 4
    assert_same(captures["hidden_states"][1:-1], tuple(expected)[:-1])


def _mutate(model: TinyModel, how: str) -> None:
    torch.manual_seed(1)
    fresh = TinyDecoderLayer(model.config)
    if how == "insert+pop":
        model.layers.insert(0, fresh)
        model.layers.pop(-1)
    elif how == "_modules by hand":
        model.layers._modules["1"] = fresh
    elif how == "swap two":
        model.layers._modules["0"], model.layers._modules["1"] = model.layers[1], model.layers[0]
    else:
        model.layers[2].__class__ = type("Other", (nn.Module,), {"forward": TinyDecoderLayer.forward})


@pytest.mark.parametrize("how", ["insert+pop", "_modules by hand", "swap two", "class"])
@pytest.mark.parametrize("kind", ["trace", "decorated"])
def test_a_structure_change_between_blocks_is_followed(model, how, kind) -> None:
    def captured() -> tuple[Any, ...]:
        with torch.no_grad():
            if kind == "decorated":
                return model(IDS, output_hidden_states=True).hidden_states
            with yamltrace.trace(model, {"hidden_states": TinyDecoderLayer}) as captures:
                model(IDS)
            return captures["hidden_states"]

    captured()
    _mutate(model, how)
    got = captured()
    layers = [m for m in model.layers if isinstance(m, TinyDecoderLayer)]
    assert len(got) == len(layers) + 1
    assert_same(got[1:-1], tuple(_plain(model, layers))[:-1])
    yamltrace.release_hooks(model)
    assert hook_count(model) == 0
