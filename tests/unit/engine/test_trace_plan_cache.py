"""Plans of `trace` blocks kept on the model: a second block on the same model and arguments reuses the
first one's plan, and any change that would plan differently is seen.

Each invalidation test changes the model, its config or the spec between two blocks and checks that
the second block captures exactly what a block planned from scratch captures (`fresh`).
"""

from __future__ import annotations

import copy
import gc
import pickle
import threading
import weakref
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import assert_same, hook_count
from torch import nn

from yamltrace.engine import OutputRecorder, attach_spec, forget_plans, invalidate
from yamltrace.errors import SpecError
from yamltrace.examples.tiny import TinyAttention, TinyConfig, TinyDecoderLayer, TinyMLP, TinyModel
from yamltrace.patch import patch_model
from yamltrace.spec import Spec
from yamltrace.tracing import plan, trace

SPEC = {"hidden_states": TinyDecoderLayer, "attentions": TinyAttention}
SPEC_FILE = (
    "yamltrace: 1\nimports: [yamltrace.examples.tiny]\noutputs:\n  hidden_states: TinyDecoderLayer\n  attentions: TinyAttention\n"
)


class MarkedLayer(TinyDecoderLayer):
    """A TinyDecoderLayer subclass that adds no state (usable by class reassignment)."""


class MarkedAttention(TinyAttention):
    """A TinyAttention subclass that adds no state."""


class Doubling(nn.Module):
    """Not a TinyDecoderLayer: a capture of its layers does not hook it."""

    def forward(self, hidden_states: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        return hidden_states * 2


def captured(model: nn.Module, ids: torch.Tensor, spec: Any = None, **kwargs: Any) -> dict[str, Any]:
    with torch.no_grad(), trace(model, spec, **kwargs) as captures:
        model(ids)
    return {key: captures[key] for key in captures} | {"paths": {key: captures.paths(key) for key in captures}}


def fresh(model: nn.Module, ids: torch.Tensor, spec: Any = None, **kwargs: Any) -> dict[str, Any]:
    """What a block planned from scratch captures (nothing kept on the model)."""
    forget_plans(model)
    return captured(model, ids, spec, **kwargs)


@pytest.mark.parametrize("kind", ["dict", "Spec", "file", "model"])
def test_a_second_block_reuses_the_first_blocks_plan(model, ids, tmp_path: Path, kind: str) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC_FILE)
    spec = {"dict": lambda: dict(SPEC), "Spec": lambda: Spec(outputs=SPEC), "file": lambda: str(path), "model": lambda: None}[
        kind
    ]
    if kind == "Spec":
        one = Spec(outputs=SPEC)
        spec = lambda: one  # noqa: E731  (a Spec is the same plan by identity, not by content)
    first = plan(model, spec())
    assert plan(model, spec()) is first
    before = captured(model, ids, spec())
    assert plan(model, spec()) is first
    assert_same(captured(model, ids, spec()), before)
    assert hook_count(model) == 0


def test_an_earlier_blocks_captures_are_left_alone_by_the_next(model, ids) -> None:
    with torch.no_grad(), trace(model, SPEC) as first:
        model(ids)
    kept = {key: list(first[key]) for key in first}
    with torch.no_grad(), trace(model, SPEC) as second:
        model(ids * 0)
    assert {key: len(first[key]) for key in first} == {key: len(v) for key, v in kept.items()}
    assert all(a is b for key in first for a, b in zip(first[key], kept[key]))
    assert not torch.equal(first["hidden_states"][1], second["hidden_states"][1])


@pytest.mark.parametrize(
    "change",
    [
        lambda m: m.layers.__setitem__(1, Doubling()),
        lambda m: m.layers.append(TinyDecoderLayer(m.config)),
        lambda m: m.layers.__delitem__(2),
        lambda m: setattr(m.layers[0], "self_attn", TinyAttention(m.config)),
        lambda m: delattr(m.layers, "2"),  # `nn.Module.__delattr__`: no registration hook runs
        lambda m: setattr(m.layers[2], "__class__", MarkedLayer),
    ],
    ids=["replaced", "added", "removed", "attribute set", "attribute deleted", "class reassigned"],
)
@pytest.mark.parametrize(
    "spec", [SPEC, {"marked": OutputRecorder(MarkedLayer, index=0, optional=True)}, None], ids=["dict", "marked", "model"]
)
def test_a_structure_change_between_blocks_is_seen(model, ids, change, spec) -> None:
    first = captured(model, ids, spec)
    change(model)
    second = captured(model, ids, spec)
    assert_same(second, fresh(model, ids, spec))
    assert hook_count(model) == 0
    del first


def test_a_patch_between_blocks_is_seen(model, ids) -> None:
    spec = {"marked": OutputRecorder(MarkedAttention, index=1, optional=True)}
    assert captured(model, ids, spec)["marked"] == ()
    with patch_model(model, {"TinyAttention": MarkedAttention}):
        patched = captured(model, ids, spec)
        assert len(patched["marked"]) == 3
        assert_same(patched, fresh(model, ids, spec))
    assert captured(model, ids, spec)["marked"] == ()


def test_a_changed_spec_file_between_blocks_is_seen(model, ids, tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC_FILE)
    first = plan(model, str(path))
    captured(model, ids, str(path))
    path.write_text(SPEC_FILE.replace("attentions: TinyAttention", "mlp: {target: TinyMLP, index: 0}"))
    second = captured(model, ids, str(path))
    assert plan(model, str(path)) is not first and "mlp" in second and "attentions" not in second
    assert_same(second, fresh(model, ids, str(path)))


def test_a_dict_spec_edited_in_place_is_seen(model, ids) -> None:
    spec = dict(SPEC)
    captured(model, ids, spec)
    spec["mlp"] = OutputRecorder(TinyMLP, index=0)
    second = captured(model, ids, spec)
    assert len(second["mlp"]) == 3
    assert_same(second, fresh(model, ids, spec))


@pytest.mark.parametrize("spec", [SPEC, None], ids=["dict", "model"])
def test_a_tie_last_setting_changed_in_the_config_is_seen(model, ids, spec) -> None:
    tied = captured(model, ids, spec)
    model.config.tie_last_hidden_states = False
    untied = captured(model, ids, spec)
    assert not torch.equal(tied["hidden_states"][-1], untied["hidden_states"][-1])
    assert_same(untied, fresh(model, ids, spec))


def test_a_layer_count_changed_in_the_config_is_seen(model, ids) -> None:
    spec = {"hidden_states": OutputRecorder(TinyDecoderLayer, index=0, layers=(-1,))}
    last = captured(model, ids, spec)
    model.config.num_hidden_layers = 2  # -1 of 2 + 1 positions: the second hidden state
    second = captured(model, ids, spec)
    assert [v is None for v in last["hidden_states"]] != [v is None for v in second["hidden_states"]]
    assert_same(second, fresh(model, ids, spec))


def test_outputs_and_strict_are_part_of_the_plan(model, ids) -> None:
    dead = {"hidden_states": TinyDecoderLayer, "gone": nn.GRU}
    assert list(captured(model, ids, SPEC, outputs="attentions")) == ["attentions", "paths"]
    assert list(captured(model, ids, SPEC)) == ["hidden_states", "attentions", "paths"]
    for _ in range(2):
        with pytest.raises(SpecError, match="matches no module"):
            captured(model, ids, dead)
        with pytest.warns(UserWarning, match="matches no module"):  # each block warns, as the first did
            captured(model, ids, dead, strict=False)


def test_the_models_own_map_and_its_attached_spec_are_part_of_the_plan(model, ids) -> None:
    first = plan(model)
    captured(model, ids)
    model._can_record_outputs = {"mlp": OutputRecorder(TinyMLP, index=0)}  # the root's map, read at each block
    mlp = captured(model, ids)
    assert list(mlp) == ["mlp", "paths"] and len(mlp["mlp"]) == 3
    assert_same(mlp, fresh(model, ids))
    del model._can_record_outputs
    tied = captured(model, ids)
    attach_spec(model, Spec(outputs={}, options={"tie_last_hidden_states": False}))
    untied = captured(model, ids)
    assert plan(model) is not first and not torch.equal(tied["hidden_states"][-1], untied["hidden_states"][-1])
    assert_same(untied, fresh(model, ids))


def test_a_submodule_map_changed_then_invalidated_is_seen() -> None:
    root = nn.Sequential(nn.Sequential(nn.ReLU(), nn.Tanh()), nn.ReLU())
    root._can_record_outputs = {"features": nn.ReLU}
    x = torch.randn(2, 3)
    assert len(captured(root, x)["features"]) == 2
    root[0]._can_record_outputs = {}  # its subtree now follows its own (empty) map
    invalidate()  # (what a submodule's map edit needs, as for the decorator's held hooks)
    second = captured(root, x)
    assert len(second["features"]) == 1
    assert_same(second, fresh(root, x))


def test_a_shallow_copy_plans_for_itself(model, ids) -> None:
    captured(model, ids, SPEC)
    twin = copy.copy(model)  # shares the submodules, and the values of the original's `__dict__`
    assert plan(twin, SPEC).scopes[0].module is twin
    assert_same(captured(twin, ids, SPEC), fresh(twin, ids, SPEC))


def test_a_copy_or_pickle_of_a_traced_model_carries_no_plan(model, ids) -> None:
    captured(model, ids, SPEC)
    for twin in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        assert plan(twin, SPEC).scopes[0].module is twin
        assert_same(captured(twin, ids, SPEC), captured(model, ids, SPEC))


def test_nested_and_concurrent_blocks_on_one_plan_each_record_their_own(model, ids) -> None:
    expected = fresh(model, ids, SPEC)
    with torch.no_grad(), trace(model, SPEC) as outer:
        model(ids)
        with trace(model, SPEC) as inner:
            model(ids)
    assert len(outer["hidden_states"]) == 2 * len(inner["hidden_states"]) == 2 * len(expected["hidden_states"])
    results: list[dict[str, Any]] = []
    threads = [threading.Thread(target=lambda: results.append(captured(model, ids, SPEC))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for result in results:
        assert_same(result, expected)


def test_kept_plans_keep_neither_the_model_nor_the_captures_alive(ids) -> None:
    model = TinyModel(TinyConfig(num_hidden_layers=2)).eval()
    with torch.no_grad(), trace(model, SPEC) as captures:
        model(ids)
    value = weakref.ref(captures["attentions"][0])
    del captures
    gc.collect()
    assert value() is None  # the run kept for the next block holds nothing of this one
    captured(model, ids, SPEC)
    owner = weakref.ref(model)
    del model
    gc.collect()
    assert owner() is None
