"""The one walk a plan reads (`engine.ModelIndex`), against torch's own `named_modules` and
`engine.logical_path`, on the structures where a walk can go wrong: a module held at two paths, wrappers
(torch.compile, activation checkpointing, DataParallel) at the root and inside, and a module holding
its own ancestor (the root's walk only: below it, torch goes round once more)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

from yamltrace.engine import ModelIndex, logical_path
from yamltrace.examples.tiny import TinyConfig, TinyModel


def _shared() -> nn.Module:
    """An encoder-decoder whose decoder holds the encoder's embedding too (as BART and T5 tie theirs)."""
    model = nn.Module()
    model.shared = nn.Embedding(8, 4)
    model.encoder = nn.ModuleDict({"embed": model.shared, "layers": nn.ModuleList(nn.Linear(4, 4) for _ in range(2))})
    model.decoder = nn.ModuleDict({"embed": model.shared, "layers": nn.ModuleList(nn.Linear(4, 4) for _ in range(2))})
    return model


def _wrapped_inside() -> nn.Module:
    model = TinyModel(TinyConfig(num_hidden_layers=3))
    model.layers[0] = torch.compile(model.layers[0], backend="eager")  # (not called: nothing compiles)
    model.layers[1] = checkpoint_wrapper(model.layers[1])
    return model


def _cycle() -> nn.Module:
    model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.ReLU()))
    model[1]._modules["back"] = model  # a module holding its ancestor: named_modules stops there
    return model


MODELS = {
    "tiny": lambda: TinyModel(TinyConfig()),
    "shared": _shared,
    "wrapped inside": _wrapped_inside,
    "compiled root": lambda: torch.compile(TinyModel(TinyConfig()), backend="eager"),
    "data parallel root": lambda: nn.DataParallel(TinyModel(TinyConfig())),
}


@pytest.mark.parametrize("build", MODELS.values(), ids=MODELS.keys())
def test_each_subtree_is_named_modules_of_its_module_with_logical_paths_and_no_wrappers(build) -> None:
    model = build()
    index = ModelIndex(model)
    assert [(p, id(m)) for p, m in index.named()] == [(p, id(m)) for p, m in model.named_modules()]
    for path, module in model.named_modules():
        expected = [(p, id(m)) for p, m in module.named_modules()]
        assert [(p, id(m)) for p, m in index.named(path)] == expected, path
        unwrapped = [(p, logical_path(module, p), id(m)) for p, m in module.named_modules() if type(m).__name__ not in _WRAPPERS]
        assert [(p, logical, id(m)) for p, logical, m in index.subtree(path)] == unwrapped, path


_WRAPPERS = {"OptimizedModule", "CheckpointWrapper", "DataParallel"}


def test_a_module_holding_its_ancestor_ends_the_walk_there_as_named_modules_does() -> None:
    model = _cycle()  # (torch's own `apply` and `to` recurse forever on it; the walk must end)
    assert [(p, id(m)) for p, m in ModelIndex(model).named()] == [(p, id(m)) for p, m in model.named_modules()]


def test_a_path_the_model_does_not_have_is_an_attribute_error_naming_it() -> None:
    with pytest.raises(AttributeError, match="TinyModel has no submodule 'layers.9'"):
        ModelIndex(TinyModel(TinyConfig())).subtree("layers.9")


def test_its_guard_sees_what_changes_the_structure_after_the_walk() -> None:
    model = _shared()
    guard = ModelIndex(model).guard()
    assert guard.holds(model)
    model.decoder["layers"].insert(0, nn.Linear(4, 4))
    model.decoder["layers"].pop(-1)  # (the same size again)
    assert not guard.holds(model)


def test_its_guard_sees_a_member_move_to_the_container_before_it_under_the_same_name() -> None:
    model = nn.Module()
    model.a = nn.ModuleDict({"x": nn.Linear(2, 2)})
    model.b = nn.ModuleDict({"y": nn.Linear(2, 2)})
    guard = ModelIndex(model).guard()
    moved = model.b._modules.pop("y")
    model.a._modules["y"] = moved  # every name and module in the same order, read container by container; b empty
    assert not guard.holds(model)
