"""load_spec, Spec, Spec.to_yaml and spec_from_model on yamltrace's own TinyModel."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from helpers import ROOT
import torch
from torch import nn

import yamltrace
from yamltrace.capture import capture_outputs
from yamltrace.errors import SpecError
from yamltrace.engine import OutputRecorder
from yamltrace.spec import ClassRegistry
from yamltrace.spec import PatchEntry, Spec, load_spec, spec_from_model
from yamltrace.examples.tiny import TinyAttention, TinyDecoderLayer, TinyMLP, TinyModel

SPECS = ROOT / "specs"

TINY_SPEC = """\
yamltrace: 1
model: TinyModel
imports: [yamltrace.examples.tiny]
outputs:
  hidden_states: TinyDecoderLayer
  attentions: {target: TinyAttention, index: 1}
"""

FULL_SPEC = r"""yamltrace: 1
model: TinyModel
imports: [yamltrace.examples.tiny]
outputs:
  hidden_states: {target: TinyDecoderLayer, layers: [0, -1], capture_initial_hidden_state: false, num_hidden_layers_key: n_layer}
  attentions: [TinyAttention, {class_name: .self_attn, index: 1, layer_name: layers}]
  mlp_outputs: {target: "yamltrace.examples.tiny:TinyMLP", index: 0}
  gates: {target: torch.nn.Linear}
options: {tie_last_hidden_states: false}
patches:
  TinyMLP: torch.nn:Identity
  "^Tiny\\w*Attention$": {replace_with: yamltrace.examples.tiny.TinyAttention, device: cuda}
"""


class Untied(nn.Module):
    """A model whose capture decorator keeps the pre-norm last hidden state."""

    _can_record_outputs = {"hidden_states": TinyDecoderLayer, "attentions": OutputRecorder(TinyAttention, index=1)}

    @capture_outputs(tie_last_hidden_states=False)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def test_bare_names_get_the_default_index_and_objects_map_their_fields() -> None:
    spec = load_spec(FULL_SPEC)
    assert spec.outputs == {
        "hidden_states": (
            OutputRecorder(
                TinyDecoderLayer, index=0, capture_initial_hidden_state=False, num_hidden_layers_key="n_layer", layers=(0, -1)
            ),
        ),
        "attentions": (
            OutputRecorder(TinyAttention, index=1),
            OutputRecorder(class_name=".self_attn", index=1, layer_name="layers"),
        ),
        "mlp_outputs": (OutputRecorder(TinyMLP, index=0),),
        "gates": (OutputRecorder(nn.Linear, index=1),),
    }
    assert spec.patches == (
        PatchEntry("TinyMLP", nn.Identity, "torch.nn:Identity"),
        PatchEntry(r"^Tiny\w*Attention$", TinyAttention, "yamltrace.examples.tiny.TinyAttention", "cuda"),
    )
    assert dict(spec.options) == {"tie_last_hidden_states": False}
    assert (spec.model, spec.imports, spec.source) == ("TinyModel", ("yamltrace.examples.tiny",), None)


def test_hidden_states_keys_default_to_index_0_others_to_1() -> None:
    spec = load_spec(
        {"yamltrace": 1, "outputs": {"encoder_hidden_states": "torch.nn:Linear", "router_logits": {"target": "torch.nn:Linear"}}}
    )
    assert spec.outputs["encoder_hidden_states"][0].index == 0
    assert spec.outputs["router_logits"][0].index == 1


def test_spec_is_immutable() -> None:
    spec = load_spec(FULL_SPEC)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.model = "Other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        spec.outputs["hidden_states"] = ()  # type: ignore[index]
    with pytest.raises(TypeError):
        spec.options["tie_last_hidden_states"] = True  # type: ignore[index]
    capture_map = spec.capture_map()
    capture_map["attentions"].clear()
    assert len(spec.outputs["attentions"]) == 2


def test_a_spec_is_returned_as_is() -> None:
    spec = load_spec(TINY_SPEC)
    assert load_spec(spec) is spec


def test_a_path_records_its_source(tmp_path: Path) -> None:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY_SPEC)
    spec = load_spec(path)
    assert spec.source is not None and spec.source.endswith("tiny.yaml")
    assert spec == load_spec(TINY_SPEC)  # the source does not take part in equality


def test_all_problems_are_reported_together_and_located() -> None:
    text = """\
yamltrace: 1
imports: [yamltrace.examples.tiny, untrusted_kernels.attn]
outputs:
  hidden_states: TinyDecoderLayr
  attentions: {target: "os:system", index: 1}
  mlp: "yamltrace.examples.tiny:TinyConfig"
patches:
  "(unclosed": torch.nn:Identity
"""
    with pytest.raises(SpecError) as info:
        load_spec(text)
    issues = {issue.json_path: issue for issue in info.value.issues}
    assert list(issues) == [
        "$.imports[1]",
        "$.outputs.hidden_states",
        "$.outputs.attentions.target",
        "$.outputs.mlp",
        "$.patches['(unclosed']",
    ]
    assert [(issue.line, issue.column) for issue in issues.values()] == [(2, 36), (4, 18), (5, 24), (6, 8), (8, 3)]
    assert "module 'untrusted_kernels.attn' is not imported yet" in issues["$.imports[1]"].message
    assert "trust_imports=True" in issues["$.imports[1]"].message
    assert (
        "class 'TinyDecoderLayr' not found; searched the registered names and modules 'yamltrace.examples.tiny'"
        in issues["$.outputs.hidden_states"].message
    )
    assert "'TinyDecoderLayer'" in issues["$.outputs.hidden_states"].message
    assert "'os:system' is the function" in issues["$.outputs.attentions.target"].message
    assert "is not a subclass of torch.nn.modules.module.Module" in issues["$.outputs.mlp"].message
    assert "'(unclosed' is not a valid regular expression" in issues["$.patches['(unclosed']"].message
    rendered = str(info.value).splitlines()
    assert len(rendered) == 5 and rendered[1].startswith("<string>:4:")


def test_the_model_key_must_name_the_model_or_a_base_class() -> None:
    class MyTiny(TinyModel):
        pass

    assert load_spec(TINY_SPEC, for_model=MyTiny).model == "TinyModel"
    with pytest.raises(SpecError, match=r"<string>:2:\d+: \$\.model: this spec is for 'TinyModel', but it is applied to Untied"):
        load_spec(TINY_SPEC, for_model=Untied)


def test_for_model_searches_the_model_module_for_bare_names() -> None:
    text = "yamltrace: 1\noutputs:\n  hidden_states: TinyDecoderLayer\n"
    with pytest.raises(SpecError, match="'TinyDecoderLayer' not found"):
        load_spec(text)
    assert load_spec(text, for_model=TinyModel).outputs["hidden_states"][0].target_class is TinyDecoderLayer


def test_a_private_registry_is_used_when_given() -> None:
    registry = ClassRegistry(entry_point_group=None)
    registry.register("Fused", TinyMLP)
    spec = load_spec({"yamltrace": 1, "outputs": {"mlp": "Fused"}}, registry=registry)
    assert spec.outputs["mlp"] == (OutputRecorder(TinyMLP, index=1),)
    with pytest.raises(SpecError, match="'Fused' not found"):
        load_spec({"yamltrace": 1, "outputs": {"mlp": "Fused"}})


def test_to_yaml_round_trips_every_field() -> None:
    spec = load_spec(FULL_SPEC)
    text = spec.to_yaml()
    assert text.startswith("# yaml-language-server: $schema=")
    assert "yamltrace.examples.tiny:TinyDecoderLayer" in text
    again = load_spec(text)
    assert again == spec
    assert again.outputs == spec.outputs and again.patches == spec.patches


CAPTURE_OPTIONS_SPEC = """\
yamltrace: 1
model: TinyModel
outputs:
  hidden_states: {target: TinyDecoderLayer, layers: [0, -1], detach: true, to: cpu, dtype: float16}
  attentions: {target: TinyAttention, index: 1, dtype: bfloat16}
options: {tie_last_hidden_states: false}
"""


def test_capture_options_load_and_round_trip() -> None:
    spec = load_spec(CAPTURE_OPTIONS_SPEC, for_model=TinyModel)
    assert spec.outputs == {
        "hidden_states": (OutputRecorder(TinyDecoderLayer, layers=(0, -1), detach=True, to="cpu", dtype=torch.float16),),
        "attentions": (OutputRecorder(TinyAttention, index=1, dtype=torch.bfloat16),),
    }
    text = spec.to_yaml()
    assert "detach: true" in text and "to: cpu" in text and "dtype: float16" in text and "dtype: bfloat16" in text
    assert load_spec(text, for_model=TinyModel) == spec


def test_a_spec_with_capture_options_traces_tiny_model(tiny: TinyModel, input_ids: torch.Tensor) -> None:
    untied = Spec(outputs=TinyModel._can_record_outputs, options={"tie_last_hidden_states": False})
    with torch.enable_grad(), yamltrace.trace(tiny, untied) as plain:
        tiny(input_ids)
    with torch.enable_grad(), yamltrace.trace(tiny, load_spec(CAPTURE_OPTIONS_SPEC, for_model=tiny)) as captured:
        tiny(input_ids)
    first, *middle, last = captured["hidden_states"]
    assert middle == [None] * (len(plain["hidden_states"]) - 2)
    for state, expected in ((first, plain["hidden_states"][0]), (last, plain["hidden_states"][-1])):
        assert state.dtype == torch.float16 and state.device.type == "cpu" and not state.requires_grad
        assert torch.equal(state, expected.half())
    assert len(captured["attentions"]) == len(plain["attentions"]) > 0
    for weights, expected in zip(captured["attentions"], plain["attentions"]):
        assert weights.dtype == torch.bfloat16 and weights.requires_grad
        assert torch.equal(weights, expected.to(torch.bfloat16))


def test_to_yaml_writes_a_local_class_by_its_registered_name() -> None:
    class LocalLayer(nn.Module):
        pass

    spec = Spec(outputs={"hidden_states": LocalLayer})
    with pytest.raises(ValueError, match="register it with register_class"):
        spec.to_yaml()
    registry = ClassRegistry(entry_point_group=None)
    registry.register("LocalLayer", LocalLayer)
    text = spec.to_yaml(registry=registry)
    assert "hidden_states: LocalLayer" in text
    assert load_spec(text, registry=registry) == spec


def test_to_yaml_refuses_a_recorder_it_cannot_express() -> None:
    spec = Spec(outputs={"attentions": OutputRecorder(TinyAttention, class_name=".self_attn")})
    with pytest.raises(ValueError, match="both target_class and class_name"):
        spec.to_yaml()


def test_spec_accepts_the_forms_of_a_capture_map() -> None:
    spec = Spec(outputs={"hidden_states": TinyDecoderLayer, "attentions": [".self_attn", OutputRecorder(TinyAttention)]})
    assert spec.outputs == {
        "hidden_states": (OutputRecorder(TinyDecoderLayer, index=0),),
        "attentions": (OutputRecorder(class_name=".self_attn", index=1), OutputRecorder(TinyAttention, index=0)),
    }


def test_spec_from_model_exports_the_output_map() -> None:
    spec = spec_from_model(TinyModel)
    assert spec.model == "TinyModel"
    assert spec.outputs == {
        "hidden_states": (OutputRecorder(TinyDecoderLayer, index=0),),
        "attentions": (OutputRecorder(TinyAttention, index=1),),
    }
    assert dict(spec.options) == {}
    assert load_spec(spec.to_yaml(), for_model=TinyModel) == spec


def test_spec_from_model_exports_tie_last_off_from_the_decorator() -> None:
    spec = spec_from_model(Untied())
    assert dict(spec.options) == {"tie_last_hidden_states": False}
    assert "tie_last_hidden_states: false" in spec.to_yaml()
    assert load_spec(spec.to_yaml()) == spec


def test_spec_from_model_needs_an_output_map() -> None:
    with pytest.raises(ValueError, match="Linear declares no _can_record_outputs"):
        spec_from_model(nn.Linear)


def _own_outputs(model: TinyModel, input_ids: torch.Tensor):
    return model(input_ids, output_hidden_states=True, output_attentions=True)


def test_trace_with_a_loaded_spec_equals_the_model_outputs(tiny: TinyModel, input_ids: torch.Tensor) -> None:
    expected = _own_outputs(tiny, input_ids)
    with yamltrace.trace(tiny, load_spec(TINY_SPEC)) as captured:
        tiny(input_ids)
    for key in ("hidden_states", "attentions"):
        assert len(captured[key]) == len(expected[key]) > 0
        assert all(torch.equal(a, b) for a, b in zip(captured[key], expected[key]))


def test_trace_with_a_path_loads_the_spec_for_the_model(tiny: TinyModel, input_ids: torch.Tensor, tmp_path: Path) -> None:
    path = tmp_path / "tiny.yaml"
    path.write_text("yamltrace: 1\nmodel: TinyModel\noutputs:\n  hidden_states: {target: TinyDecoderLayer, layers: [-1]}\n")
    expected = _own_outputs(tiny, input_ids)
    with yamltrace.trace(tiny, str(path)) as captured:
        tiny(input_ids)
    assert captured["hidden_states"][:-1] == (None,) * (len(expected.hidden_states) - 1)
    assert torch.equal(captured["hidden_states"][-1], expected.hidden_states[-1])


def test_the_shipped_tiny_spec_loads_and_traces(tiny: TinyModel, input_ids: torch.Tensor) -> None:
    spec = load_spec(SPECS / "tiny.yaml", for_model=tiny)
    assert spec.outputs["hidden_states"][0].target_class is TinyDecoderLayer
    expected = _own_outputs(tiny, input_ids)
    with yamltrace.trace(tiny, spec, outputs="hidden_states") as captured:
        tiny(input_ids)
    assert len(captured["hidden_states"]) == len(expected.hidden_states)
    assert all(torch.equal(a, b) for a, b in zip(captured["hidden_states"], expected.hidden_states))


@pytest.mark.parametrize("path", sorted(SPECS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_spec_resolves_and_traces_the_tiny_model(path: Path, tiny: TinyModel, input_ids: torch.Tensor) -> None:
    spec = load_spec(path, for_model=tiny)
    assert spec.outputs and all(r.target_class is not None or r.class_name for rs in spec.outputs.values() for r in rs)
    assert load_spec(spec.to_yaml(), for_model=tiny) == spec
    with yamltrace.trace(tiny, path) as captured:
        tiny(input_ids)
    for key in spec.outputs:
        assert any(isinstance(value, torch.Tensor) for value in captured[key]), key
