"""Small hand-built models with capture scopes, the way transformers nests its models: a task head over a
decorated base model, a decorated model holding another, and an encoder-decoder with no map of its own."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from yamltrace.capture import capture_outputs
from yamltrace.engine import OutputRecorder
from yamltrace.examples.tiny import TinyAttention, TinyConfig, TinyDecoderLayer, TinyModel
from yamltrace.modeling import BaseModelOutputWithPast

MAP = {"hidden_states": TinyDecoderLayer, "attentions": TinyAttention}


class Head(nn.Module):
    """A task head the way transformers writes one: not decorated, same map as its base, one extra layer
    run outside the base model's forward (it records nothing, as in transformers)."""

    _can_record_outputs = MAP
    config_class = TinyConfig

    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.model = TinyModel(config)
        self.extra = TinyDecoderLayer(config)
        self.lm_head = nn.Linear(config.hidden_size, 5)

    def forward(self, input_ids: torch.Tensor, **kwargs: Any) -> dict[str, Any]:
        out = self.model(input_ids, **kwargs)
        return {"logits": self.lm_head(self.extra(out.last_hidden_state)), "hidden_states": out.hidden_states}


class Outer(TinyModel):
    """A decorated model holding another decorated model of the same layer class (like GitModel's tower)."""

    def __init__(self, config: TinyConfig) -> None:
        super().__init__(config)
        self.tower = TinyModel(config)

    @capture_outputs
    def forward(self, input_ids: torch.Tensor, **kwargs: Any) -> BaseModelOutputWithPast:
        hidden = self.embed_tokens(input_ids) + self.tower(input_ids).last_hidden_state
        for layer in self.layers:
            hidden = layer(hidden)
        return BaseModelOutputWithPast(last_hidden_state=self.norm(hidden))


class CrossDecoder(TinyModel):
    """A decoder whose map also records cross-attention (its `cross` attention modules)."""

    _can_record_outputs = {
        "hidden_states": TinyDecoderLayer,
        "attentions": OutputRecorder(TinyAttention, index=1, layer_name="self_attn"),
        "cross_attentions": OutputRecorder(TinyAttention, index=1, layer_name="cross"),
    }

    def __init__(self, config: TinyConfig) -> None:
        super().__init__(config)
        self.cross = TinyAttention(config)

    @capture_outputs
    def forward(self, input_ids: torch.Tensor, memory: torch.Tensor, **kwargs: Any) -> BaseModelOutputWithPast:
        hidden = self.embed_tokens(input_ids)
        for layer in self.layers:
            hidden = layer(hidden)
        hidden = hidden + self.cross(hidden + memory)[0]
        return BaseModelOutputWithPast(last_hidden_state=self.norm(hidden))


class EncoderDecoder(nn.Module):
    """An encoder-decoder with no map of its own (like BartModel)."""

    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.encoder = TinyModel(config)
        self.decoder = CrossDecoder(config)

    def forward(self, input_ids: torch.Tensor, **kwargs: Any) -> dict[str, Any]:
        encoded = self.encoder(input_ids, **kwargs)
        decoded = self.decoder(input_ids, encoded.last_hidden_state, **kwargs)
        return {"encoder": encoded, "decoder": decoded}


def build(cls: type[nn.Module], layers: int = 2) -> nn.Module:
    """A model of `cls` (a tiny config), seeded, in eval mode."""
    torch.manual_seed(0)
    return cls(TinyConfig(num_hidden_layers=layers)).eval()
