"""Recorders with several target classes (transformers' `OutputRecorder(target_class=(A, B))`): capture,
`trace`, a spec's `target: [A, B]`, export with `spec_from_model`, and strict-recorder hints."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import yaml
from torch import nn

from yamltrace import OutputRecorder, Spec, SpecError, load_spec, spec_from_model, trace
from yamltrace.examples.tiny import TinyAttention, TinyConfig, TinyDecoderLayer, TinyModel


class LoopLayer(nn.Module):
    """A layer of another class than TinyDecoderLayer (not a subclass), as a looped layer is."""

    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.proj = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden_states: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        return hidden_states + self.proj(hidden_states)


class MixedModel(TinyModel):
    """TinyModel with every other layer a LoopLayer, and one recorder of both layer classes."""

    _can_record_outputs = {"hidden_states": OutputRecorder((TinyDecoderLayer, LoopLayer)), "attentions": TinyAttention}

    def __init__(self, config: TinyConfig) -> None:
        super().__init__(config)
        self.layers = nn.ModuleList(LoopLayer(config) if i % 2 else TinyDecoderLayer(config) for i in range(4))


def _model() -> MixedModel:
    torch.manual_seed(0)
    return MixedModel(TinyConfig(num_hidden_layers=4)).eval()


IDS = torch.tensor([[1, 2, 3, 4, 5]])
LAYERS = f"{__name__}:LoopLayer"


def test_a_tuple_recorder_captures_every_layer_of_its_classes() -> None:
    model = _model()
    with torch.no_grad():
        own = model(IDS, output_hidden_states=True).hidden_states
        with trace(model) as captured:
            model(IDS)
    assert len(own) == 5 and all(torch.equal(a, b) for a, b in zip(own, captured["hidden_states"]))


def test_spec_from_model_exports_a_tuple_target_as_a_list_that_loads_back_equal() -> None:
    model = _model()
    spec = spec_from_model(MixedModel)
    written = yaml.safe_load(spec.to_yaml())["outputs"]["hidden_states"]
    assert written["target"] == ["yamltrace.examples.tiny:TinyDecoderLayer", LAYERS]
    loaded = load_spec(spec.to_yaml())
    assert loaded == spec and loaded.outputs["hidden_states"][0].target_class == (TinyDecoderLayer, LoopLayer)
    with torch.no_grad():
        own = model(IDS, output_hidden_states=True).hidden_states
        with trace(model, loaded) as captured:
            model(IDS)
    assert all(torch.equal(a, b) for a, b in zip(own, captured["hidden_states"], strict=True))


def test_a_spec_target_list_names_several_classes() -> None:
    document = {"yamltrace": 1, "outputs": {"hidden_states": {"target": ["yamltrace.examples.tiny:TinyDecoderLayer", LAYERS]}}}
    (recorder,) = load_spec(document).outputs["hidden_states"]
    assert recorder == OutputRecorder((TinyDecoderLayer, LoopLayer))


def test_a_target_list_with_an_unknown_class_is_located_at_its_item() -> None:
    document = {"yamltrace": 1, "outputs": {"hidden_states": {"target": [LAYERS, "yamltrace.examples.tiny:NoSuchLayer"]}}}
    with pytest.raises(SpecError) as raised:
        load_spec(document)
    assert [i.json_path for i in raised.value.issues] == ["$.outputs.hidden_states.target[1]"]


def test_a_dead_tuple_recorder_names_its_classes_and_the_closest() -> None:
    spec = Spec(outputs={"hidden_states": OutputRecorder((LoopLayer, MixedModel))})
    with pytest.raises(SpecError, match=r"class LoopLayer \| MixedModel matches no module.*closest classes: TinyModel"):
        with trace(TinyModel(TinyConfig()), spec):
            pass
