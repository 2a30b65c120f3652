"""Plans: walked afresh (never stale), the one cache of `trace` plans reused while the model is unchanged
and its key's content is equal, never keeping a model alive."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from torch import nn

import yamltrace.engine as engine
from yamltrace.patch import patch_model, patch_output_recorders
from yamltrace.examples.tiny import TinyAttention, TinyConfig, TinyDecoderLayer, TinyMLP, TinyModel
from yamltrace.spec import Spec
from yamltrace.tracing import plan, trace


class OtherLayer(nn.Module):
    """Not a TinyDecoderLayer: a capture of hidden states does not hook it."""

    def forward(self, hidden_states: torch.Tensor, **kwargs) -> torch.Tensor:
        return hidden_states * 2


class MarkedLayer(TinyDecoderLayer):
    """A TinyDecoderLayer subclass that adds no state (usable by class reassignment)."""


class MarkedAttention(TinyAttention):
    """A TinyAttention subclass that adds no state."""


def hidden_count(model: TinyModel, ids: torch.Tensor) -> int:
    return len(model(ids, output_hidden_states=True).hidden_states)


def test_an_unchanged_model_keeps_its_plan_and_its_captures(model, ids) -> None:
    first = model(ids, output_hidden_states=True, output_attentions=True)
    second = model(ids, output_hidden_states=True, output_attentions=True)
    for key in ("hidden_states", "attentions"):
        assert len(first[key]) == len(second[key]) > 0
        for a, b in zip(first[key], second[key]):
            assert torch.equal(a, b)
    assert plan(model) is plan(model)


def test_plans_are_kept_by_the_content_of_their_spec(model) -> None:
    """Equal specs built apart (and a dict declaring the same) share a plan; another content does not."""
    one = Spec(outputs={"hidden_states": TinyDecoderLayer})
    same = Spec(outputs={"hidden_states": TinyDecoderLayer})
    assert one is not same and plan(model, one) is plan(model, same)
    as_dict = {"hidden_states": TinyDecoderLayer}
    assert plan(model, as_dict) is plan(model, dict(as_dict))
    other = Spec(outputs={"hidden_states": TinyDecoderLayer, "attentions": TinyAttention})
    assert plan(model, other) is not plan(model, one)
    assert [o.name for o in plan(model, other).outputs] == ["hidden_states", "attentions"]


def test_a_spec_from_another_file_gets_its_own_plan(model, tmp_path) -> None:
    """What planning warns about names the spec's file: an equal spec from another file is planned for itself."""
    text = "yamltrace: 1\noutputs:\n  hidden_states: yamltrace.examples.tiny:TinyDecoderLayer\n"
    (tmp_path / "a.yaml").write_text(text, encoding="utf-8")
    (tmp_path / "b.yaml").write_text(text, encoding="utf-8")
    from yamltrace.spec import load_spec

    a, b = load_spec(tmp_path / "a.yaml", trust_imports=True), load_spec(tmp_path / "b.yaml", trust_imports=True)
    assert a == b
    assert plan(model, a) is plan(model, a) is not plan(model, b)


def test_a_replaced_submodule_is_hooked_and_the_old_one_is_not(model, ids) -> None:
    assert hidden_count(model, ids) == 4
    old = model.layers[1]
    model.layers[1] = OtherLayer()
    assert hidden_count(model, ids) == 3
    model.layers[1] = old
    assert hidden_count(model, ids) == 4


def test_a_submodule_set_by_attribute_is_captured(model, ids) -> None:
    with trace(model, outputs="attentions") as before:
        model(ids)
    new = TinyAttention(model.config)
    model.layers[0].self_attn = new
    with trace(model, outputs="attentions") as after:
        model(ids)
    with trace(new, {"attentions": TinyAttention}) as alone:
        new(model.layers[0].input_layernorm(model.embed_tokens(ids)))
    assert len(after["attentions"]) == len(before["attentions"]) == 3
    assert torch.equal(after["attentions"][0], alone["attentions"][0])
    assert not torch.equal(after["attentions"][0], before["attentions"][0])


@pytest.mark.parametrize(
    "change",
    [
        lambda layers: layers.append(TinyDecoderLayer(TinyConfig())),
        lambda layers: layers.insert(0, TinyDecoderLayer(TinyConfig())),
        lambda layers: layers.pop(0),
        lambda layers: layers.__delitem__(-1),
    ],
    ids=["append", "insert", "pop", "del"],
)
def test_module_list_changes_are_seen(model, ids, change) -> None:
    with trace(model, outputs="hidden_states") as before:
        model(ids)
    change(model.layers)
    with trace(model, outputs="hidden_states") as after:
        model(ids)
    assert len(after["hidden_states"]) == len(model.layers) + 1 != len(before["hidden_states"])


def test_deleting_a_submodule_attribute_is_seen(model) -> None:
    tasks = (("linear", engine.OutputRecorder(target_class=nn.Linear)),)
    paths = [path for _, path, _ in engine.plan_hooks(model, tasks, nested_maps=False)]
    assert ".layers.0.mlp.gate_proj" in paths
    del model.layers[0].mlp.gate_proj
    paths = [path for _, path, _ in engine.plan_hooks(model, tasks, nested_maps=False)]
    assert ".layers.0.mlp.gate_proj" not in paths
    assert ".layers.0.mlp.up_proj" in paths


def test_a_collected_submodule_invalidates_the_plan(model, ids) -> None:
    assert hidden_count(model, ids) == 4
    model.layers._modules["1"] = OtherLayer()  # bypasses nn.Module's API and its registration hooks
    gc.collect()
    assert hidden_count(model, ids) == 3


def test_a_reassigned_class_is_seen(model) -> None:
    tasks = (("marked", engine.OutputRecorder(target_class=MarkedLayer)),)
    assert engine.plan_hooks(model, tasks, nested_maps=False) == []
    model.layers[2].__class__ = MarkedLayer
    assert [path for _, path, _ in engine.plan_hooks(model, tasks, nested_maps=False)] == [".layers.2"]
    model.layers[2].__class__ = TinyDecoderLayer
    assert engine.plan_hooks(model, tasks, nested_maps=False) == []


def test_patch_model_and_its_undo_are_seen(model) -> None:
    tasks = (("marked", engine.OutputRecorder(target_class=MarkedAttention)),)
    assert engine.plan_hooks(model, tasks, nested_maps=False) == []
    with patch_model(model, {"TinyAttention": MarkedAttention}):
        assert len(engine.plan_hooks(model, tasks, nested_maps=False)) == 3
    assert engine.plan_hooks(model, tasks, nested_maps=False) == []


def test_instance_capture_maps_set_and_restored_by_patching_are_seen() -> None:
    outer = nn.Sequential(TinyModel(TinyConfig(num_hidden_layers=2)))
    tasks = (("attentions", engine.OutputRecorder(target_class=OtherLayer)),)
    both = [".0.layers.0.self_attn", ".0.layers.1.self_attn"]
    assert [p for _, p, _ in engine.plan_hooks(outer, tasks, nested_maps=True, keys=[tasks[0][0]])] == both
    outer[0].layers[0].self_attn.__class__ = MarkedAttention
    with patch_output_recorders(outer, {"TinyAttention": MarkedAttention}):
        assert [p for _, p, _ in engine.plan_hooks(outer, tasks, nested_maps=True, keys=[tasks[0][0]])] == both[:1]
    assert [p for _, p, _ in engine.plan_hooks(outer, tasks, nested_maps=True, keys=[tasks[0][0]])] == both


def test_invalidate_after_changing_a_capture_map(model) -> None:
    outer = nn.Sequential(model)
    tasks = (("mlp", engine.OutputRecorder(target_class=OtherLayer)),)
    assert engine.plan_hooks(outer, tasks, nested_maps=True, keys=[tasks[0][0]]) == []  # TinyModel's own map has no "mlp"
    model._can_record_outputs = {"mlp": TinyMLP}
    engine.invalidate()
    assert len(engine.plan_hooks(outer, tasks, nested_maps=True, keys=[tasks[0][0]])) == 3


def test_the_cache_does_not_keep_a_model_alive(ids) -> None:
    model = TinyModel(TinyConfig(num_hidden_layers=2))
    model.layers[0].owner = [model]  # a reference cycle through a submodule
    model(ids, output_hidden_states=True, output_attentions=True)
    with trace(model) as captures:
        model(ids)
    assert captures["hidden_states"]
    assert plan(model) is plan(model)  # kept
    ref = weakref.ref(model)
    del model, captures
    gc.collect()
    assert ref() is None


class SlicingModel(TinyModel):
    """Slices its ModuleList in forward, as transformers' Llama does (`self.layers[:n]`), which
    registers the layers into a new, throwaway ModuleList on every call."""

    def forward(self, input_ids: torch.Tensor, **kwargs) -> torch.Tensor:  # type: ignore[override]
        hidden_states = self.embed_tokens(input_ids)
        for layer in self.layers[: self.config.num_hidden_layers]:
            hidden_states = layer(hidden_states)
        return self.norm(hidden_states)


def test_registrations_outside_the_model_keep_its_plan(ids) -> None:
    model = SlicingModel(TinyConfig(num_hidden_layers=3)).eval()
    spec = {"hidden_states": TinyDecoderLayer}
    kept = plan(model, spec)
    for _ in range(3):
        with trace(model, spec) as captures:
            model(ids)
        assert len(captures["hidden_states"]) == 4
    nn.Sequential(nn.Linear(2, 2))  # a registration into a module no plan visited
    assert plan(model, spec) is kept


class _Block(nn.Module):
    """A class whose map is a property: each instance answers for itself."""

    def __init__(self, declares: bool) -> None:
        super().__init__()
        self.declares = declares
        self.act, self.tanh = nn.ReLU(), nn.Tanh()

    @property
    def _can_record_outputs(self) -> dict:
        return {"features": nn.ReLU} if self.declares else {}


class _Forwarding(nn.Module):
    """A class with its own `__getattr__`, answering the map from an attribute of the instance."""

    def __init__(self, declares: bool) -> None:
        super().__init__()
        self.declares = declares
        self.act, self.tanh = nn.ReLU(), nn.Tanh()

    def __getattr__(self, name: str):
        if name == "_can_record_outputs" and self.__dict__["declares"]:
            return {"features": nn.ReLU}
        return super().__getattr__(name)


def test_maps_read_on_the_instance_are_read_for_each_module() -> None:
    """A walk memoises a class's map by class, except where the instance decides (a property, a class
    with `__getattr__`, a map set on the instance)."""
    root = nn.Module()
    root.a, root.b = _Block(True), _Block(False)
    root.c, root.d = _Forwarding(True), _Forwarding(False)
    root.e, root.f = nn.Sequential(nn.ReLU(), nn.Tanh()), nn.Sequential(nn.ReLU(), nn.Tanh())
    root.e._can_record_outputs = {"features": nn.ReLU}
    plan = engine.plan_hooks(root, engine.normalize_output_map({"features": nn.Tanh}), nested_maps=True)
    # `a`, `c` and `e` declare ReLU; `b` declares an empty map; `d` and `f` follow the root's Tanh.
    assert {path for _, path, _ in plan} == {".a.act", ".c.act", ".d.tanh", ".e.0", ".f.1"}


def test_an_equal_spec_moved_within_its_file_is_located_anew(model, tmp_path) -> None:
    """The same recorders moved down by a comment: the dead recorder's warning names the new line."""
    import warnings

    from yamltrace.spec import load_spec

    path = tmp_path / "spec.yaml"
    text = "yamltrace: 1\noutputs:\n  missing: {class_name: nowhere, optional: false}\n"
    path.write_text(text, encoding="utf-8")
    with warnings.catch_warnings(record=True) as first:
        warnings.simplefilter("always")
        plan(model, load_spec(path), strict=False)
    path.write_text("# a comment\n" + text, encoding="utf-8")
    with warnings.catch_warnings(record=True) as second:
        warnings.simplefilter("always")
        plan(model, load_spec(path), strict=False)
    assert any(":3:" in str(w.message) for w in first), [str(w.message) for w in first]
    assert any(":4:" in str(w.message) for w in second), [str(w.message) for w in second]
