"""The plan of a `trace` block (`yamltrace.tracing.plan`), checked without a forward: scopes, exposed
names, hooks, selections and tie points; building it installs nothing and runs nothing."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from helpers import hook_count
from helpers_scopes import EncoderDecoder, Head, Outer, build
from yamltrace.engine import OutputRecorder
from yamltrace.errors import SpecError
from yamltrace.examples.tiny import TinyAttention, TinyDecoderLayer, TinyModel
from yamltrace.spec import Spec
from yamltrace.tracing import plan, trace


class Forbidden(TinyModel):
    """A model whose forward must not run while a plan is built."""

    def forward(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("planning ran a forward")


def test_a_plan_runs_no_forward_and_installs_nothing() -> None:
    model = build(Forbidden, layers=3)
    planned = plan(model, {"hidden_states": TinyDecoderLayer, "attentions": TinyAttention})
    assert hook_count(model) == 0
    assert [o.name for o in planned.outputs] == ["hidden_states", "attentions"]
    (root,) = planned.scopes
    assert root.exposed and root.path == "" and root.module is model
    assert [row.path for row in root.hooks] == [
        ".layers.0.self_attn",
        ".layers.0",
        ".layers.1.self_attn",
        ".layers.1",
        ".layers.2.self_attn",
        ".layers.2",
    ]
    assert all(row.module is model.get_submodule(row.path[1:]) for row in root.hooks)
    assert {entry.key for row in root.hooks for entry in row.entries} == {"hidden_states", "attentions"}
    assert [(tie.module, tie.enabled) for tie in root.ties] == [(model, True)]
    assert root.selections == {}


def test_outputs_limit_the_hooks_and_the_names_and_unknown_names_are_refused() -> None:
    model = build(TinyModel)
    planned = plan(model, {"hidden_states": TinyDecoderLayer, "attentions": TinyAttention}, outputs="attentions")
    assert [o.name for o in planned.outputs] == ["attentions"]
    (root,) = planned.scopes
    assert root.keys == ("attentions",) and root.ties == ()
    assert all(entry.key == "attentions" for row in root.hooks for entry in row.entries)
    assert planned.names == {("", "hidden_states"): "hidden_states", ("", "attentions"): "attentions"}
    with pytest.raises(KeyError, match="attention"):
        plan(model, {"attentions": TinyAttention}, outputs="attention")


def test_negative_layers_resolve_against_the_config_else_the_hooked_modules() -> None:
    model = build(TinyModel, layers=3)
    recorder = OutputRecorder(TinyDecoderLayer, index=0, layers=(-1,))
    assert plan(model, {"hidden_states": recorder}).scopes[0].selections == {"hidden_states": frozenset({3})}
    bare = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))  # no config: counted from the hooks
    counted = plan(bare, {"linear": OutputRecorder(nn.Linear, index=0, layers=(-1,))})
    assert counted.scopes[0].selections == {"linear": frozenset({1})}


def test_model_scopes_a_head_ties_at_its_base_model_and_an_outer_model_shadows_its_tower() -> None:
    head = build(Head)
    (base,) = plan(head).scopes
    assert base.path == "model" and base.exposed and [t.module for t in base.ties] == [head.model]
    assert all(row.path.startswith(".model.") for row in base.hooks)  # the extra layer is not recorded
    outer = build(Outer)
    root, tower = plan(outer).scopes
    assert (root.path, root.exposed, tower.path, tower.exposed) == ("", True, "tower", False)
    assert not any(row.path.startswith(".tower") for row in root.hooks)  # the tower keeps its own captures


def test_encoder_decoder_names_come_from_the_plan() -> None:
    names = [o.name for o in plan(build(EncoderDecoder)).outputs]
    assert "encoder_hidden_states" in names and "decoder_hidden_states" in names and "cross_attentions" in names


def test_a_strict_plan_refuses_a_dead_recorder_before_any_block() -> None:
    model = build(TinyModel)
    with pytest.raises(SpecError, match="matches no module"):
        plan(model, Spec(outputs={"mlp": (OutputRecorder(nn.GRU),)}))
    with pytest.warns(UserWarning, match="matches no module"):
        plan(model, Spec(outputs={"mlp": (OutputRecorder(nn.GRU),)}), strict=False)


def test_a_block_records_what_its_plan_says(input_ids) -> None:
    model = build(TinyModel)
    spec = {"hidden_states": TinyDecoderLayer, "attentions": TinyAttention}
    planned = plan(model, spec)
    with torch.no_grad(), trace(model, spec) as captures:
        model(input_ids)
    assert list(captures) == [o.name for o in planned.outputs]
    hooked = {row.path for row in planned.scopes[0].hooks}
    assert {p for p in captures.paths("attentions")} == {f"{p[1:]}" for p in hooked if p.endswith("self_attn")}
    assert plan(model, spec) == planned  # the same plan again: nothing of the block is in it
