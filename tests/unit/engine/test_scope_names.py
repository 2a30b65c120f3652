"""How `trace` names the captures of composites with several decorated parts, as transformers' outputs do:
a multimodal model's language model keeps the plain keys, its other towers are prefixed; a dual encoder
and an encoder-decoder are prefixed throughout."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from helpers import assert_same
from helpers_scopes import build
from yamltrace.examples.tiny import TinyAttention, TinyConfig, TinyDecoderLayer, TinyModel
from yamltrace.tracing import trace

FLAGS = {"output_hidden_states": True, "output_attentions": True}


class TextLayer(TinyDecoderLayer):
    """The language model's layer class (a vision tower's layers are plain TinyDecoderLayers)."""


class TextModel(TinyModel):
    _can_record_outputs = {"hidden_states": TextLayer, "attentions": TinyAttention}

    def __init__(self, config: TinyConfig) -> None:
        super().__init__(config)
        self.layers = nn.ModuleList(TextLayer(config) for _ in range(config.num_hidden_layers))


class Multimodal(nn.Module):
    """Like Gemma3Model: not decorated, declares its language model's layer class for `hidden_states`;
    its `attentions` class is also the vision tower's, so that key is named after each part."""

    _can_record_outputs = {"hidden_states": TextLayer, "attentions": TinyAttention}

    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.tower = TinyModel(config)
        self.text = TextModel(config)

    def forward(self, input_ids: torch.Tensor, **kwargs: Any) -> dict[str, Any]:
        image = self.tower(input_ids, **kwargs)
        out = self.text(input_ids, **kwargs)
        return {"hidden_states": out.hidden_states, "text": out, "image": image}


class LanguageModelComposite(nn.Module):
    """Like LlavaModel: no map of its own, a vision tower and a `language_model` whose captures it returns."""

    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.vision_tower = TinyModel(config)
        self.language_model = TinyModel(config)

    def forward(self, input_ids: torch.Tensor, **kwargs: Any) -> dict[str, Any]:
        image = self.vision_tower(input_ids, **kwargs)
        out = self.language_model(input_ids, **kwargs)
        return {"hidden_states": out.hidden_states, "attentions": out.attentions, "image": image}


class DualEncoder(nn.Module):
    """Like CLIPModel: a map that hooks both towers, each tower's captures returned under its own name."""

    _can_record_outputs = {"hidden_states": TinyDecoderLayer, "attentions": TinyAttention}

    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.text_model = TinyModel(config)
        self.vision_model = TinyModel(config)

    def forward(self, input_ids: torch.Tensor, **kwargs: Any) -> dict[str, Any]:
        return {
            "text_model_output": self.text_model(input_ids, **kwargs),
            "vision_model_output": self.vision_model(input_ids, **kwargs),
        }


def traced(model: nn.Module, input_ids: torch.Tensor) -> tuple[Any, Any]:
    with torch.no_grad():
        own = model(input_ids, **FLAGS)
        with trace(model) as captures:
            model(input_ids)
    return own, captures


def test_the_part_the_root_map_hooks_keeps_the_plain_key(input_ids) -> None:
    own, captures = traced(build(Multimodal), input_ids)
    assert set(captures) == {"hidden_states", "tower_hidden_states", "tower_attentions", "text_attentions"}
    assert_same(captures["hidden_states"], own["hidden_states"])
    assert_same(captures["tower_hidden_states"], own["image"].hidden_states)
    assert_same(captures["text_attentions"], own["text"].attentions)
    assert_same(captures["tower_attentions"], own["image"].attentions)


def test_a_language_model_keeps_the_plain_keys_when_the_root_has_no_map(input_ids) -> None:
    own, captures = traced(build(LanguageModelComposite), input_ids)
    assert list(captures) == ["vision_tower_hidden_states", "hidden_states", "vision_tower_attentions", "attentions"]
    for key in ("hidden_states", "attentions"):
        assert_same(captures[key], own[key], key)
        assert_same(captures[f"vision_tower_{key}"], own["image"][key], key)


def test_a_dual_encoder_is_prefixed_in_both_towers(input_ids) -> None:
    own, captures = traced(build(DualEncoder), input_ids)
    assert set(captures) == {
        f"{part}_{key}" for part in ("text_model", "vision_model") for key in ("hidden_states", "attentions")
    }
    for part in ("text_model", "vision_model"):
        for key in ("hidden_states", "attentions"):
            assert_same(captures[f"{part}_{key}"], own[f"{part}_output"][key], f"{part}_{key}")
