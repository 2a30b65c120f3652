"""Tiny random transformers models for the oracle tests, built in-process (nothing is downloaded).

Each `Case` builds a model and its inputs. `redecorated(cls, tie)` makes a subclass whose forward is
transformers' own undecorated forward code under yamltrace's decorators, so the same code runs under
both capture engines.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from transformers import (
    BertConfig,
    BertModel,
    CLIPVisionConfig,
    CLIPVisionModel,
    GPT2Config,
    GPT2Model,
    LlamaConfig,
    LlamaModel,
    PreTrainedConfig,
)
from transformers import PreTrainedModel as HFPreTrainedModel
from transformers.modeling_outputs import ModelOutput as HFModelOutput
from transformers.utils.output_capturing import OutputRecorder as HFOutputRecorder

from yamltrace.capture import capture_outputs
from yamltrace.modeling import merge_with_config_defaults

VOCAB = 99


@dataclass(frozen=True)
class Case:
    """A transformers base model to compare against: how to build it, its inputs, its decorator's tie-last."""

    name: str
    build: Callable[[], nn.Module]
    inputs: Callable[[], dict[str, torch.Tensor]]
    tie_last_hidden_states: bool


def _ids() -> dict[str, torch.Tensor]:
    return {"input_ids": torch.randint(0, VOCAB, (2, 7), generator=torch.Generator().manual_seed(1))}


def _gpt2_inputs() -> dict[str, torch.Tensor]:
    encoder = torch.randn(2, 5, 32, generator=torch.Generator().manual_seed(2))
    return {**_ids(), "encoder_hidden_states": encoder}


def _pixels() -> dict[str, torch.Tensor]:
    return {"pixel_values": torch.randn(2, 3, 30, 30, generator=torch.Generator().manual_seed(3))}


def tiny_llama_config(**overrides: Any) -> LlamaConfig:
    """A tiny random LlamaConfig with eager attention; keyword arguments override the sizes."""
    sizes: dict[str, Any] = dict(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=37,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    config = LlamaConfig(**{**sizes, **overrides})
    config._attn_implementation = "eager"
    return config


def _llama() -> nn.Module:
    return LlamaModel(tiny_llama_config())


def _gpt2() -> nn.Module:
    config = GPT2Config(
        vocab_size=VOCAB,
        n_embd=32,
        n_layer=2,
        n_head=4,
        n_positions=64,
        add_cross_attention=True,
        attn_implementation="eager",
    )
    return GPT2Model(config)


def _bert() -> nn.Module:
    config = BertConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        attn_implementation="eager",
    )
    return BertModel(config)


def _clip_vision() -> nn.Module:
    config = CLIPVisionConfig(
        hidden_size=32,
        intermediate_size=37,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=30,
        patch_size=10,
        attn_implementation="eager",
    )
    return CLIPVisionModel(config)


CASES = (
    Case("llama", _llama, _ids, True),
    Case("gpt2-cross-attention", _gpt2, _gpt2_inputs, True),
    Case("bert", _bert, _ids, True),
    Case("clip-vision", _clip_vision, _pixels, False),
)


def undecorated_forward(cls: type[nn.Module]) -> Callable[..., Any]:
    """The forward code of `cls` under all its decorators (followed through `__wrapped__`)."""
    forward = cls.forward
    while hasattr(forward, "__wrapped__"):
        forward = forward.__wrapped__
    return forward


def redecorated(cls: type[nn.Module], tie_last_hidden_states: bool) -> type[nn.Module]:
    """A subclass of `cls` whose forward is `cls`'s code under yamltrace's decorators instead."""
    forward = capture_outputs(undecorated_forward(cls), tie_last_hidden_states=tie_last_hidden_states)
    return type(f"Yamltrace{cls.__name__}", (cls,), {"forward": merge_with_config_defaults(forward)})


def build_pair(case: Case) -> tuple[nn.Module, nn.Module]:
    """(the transformers model, the same weights in its yamltrace-decorated subclass), both in eval mode."""
    torch.manual_seed(0)
    model = case.build().eval()
    twin = redecorated(type(model), case.tie_last_hidden_states)(model.config).eval()
    twin.load_state_dict(model.state_dict())
    return model, twin


# A composite model on transformers' PreTrainedModel, to compare both engines on nested output maps.

TOY_DIM = 8


class ToyConfig(PreTrainedConfig):
    model_type = "yamltrace-oracle-toy"


class ToyAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(TOY_DIM, TOY_DIM)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        weights = torch.softmax(x @ x.transpose(-1, -2), dim=-1)
        return self.proj(weights @ x), weights


class ToyLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = ToyAttention()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.attn(x)[0]


@dataclass
class ToyOutput(HFModelOutput):
    last_hidden_state: torch.Tensor | None = None
    inner_hidden_states: tuple[torch.Tensor, ...] | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


def make_composite(capture: Callable[..., Any], inner_decorated: bool) -> type[nn.Module]:
    """An outer model (one layer, map with hidden states and attentions) around a nested model whose
    map lists hidden states only; `capture` is transformers' or yamltrace's `capture_outputs`."""

    def inner_forward(self: nn.Module, x: torch.Tensor, **kwargs: Any) -> ToyOutput:
        for layer in self.layers:
            x = layer(x)
        return ToyOutput(last_hidden_state=x)

    def outer_forward(self: nn.Module, x: torch.Tensor, **kwargs: Any) -> ToyOutput:
        inner = self.inner(self.layer(x), **kwargs)
        return ToyOutput(last_hidden_state=inner.last_hidden_state, inner_hidden_states=inner.hidden_states)

    class Inner(HFPreTrainedModel):
        config_class = ToyConfig
        _can_record_outputs = {"hidden_states": ToyLayer}

        def __init__(self, config: ToyConfig) -> None:
            super().__init__(config)
            self.layers = nn.ModuleList(ToyLayer() for _ in range(2))
            self.post_init()

        forward = capture(inner_forward, tie_last_hidden_states=False) if inner_decorated else inner_forward

    class Outer(HFPreTrainedModel):
        config_class = ToyConfig
        _can_record_outputs = {"hidden_states": ToyLayer, "attentions": HFOutputRecorder(ToyAttention, index=1)}

        def __init__(self, config: ToyConfig) -> None:
            super().__init__(config)
            self.layer = ToyLayer()
            self.inner = Inner(config)
            self.post_init()

        forward = capture(outer_forward, tie_last_hidden_states=False)

    return Outer


def make_normed(capture: Callable[..., Any], tie_last_hidden_states: bool) -> type[nn.Module]:
    """Two layers then a final norm, so tie-last is visible; `capture` as in `make_composite`."""

    def normed_forward(self: nn.Module, x: torch.Tensor, **kwargs: Any) -> ToyOutput:
        for layer in self.layers:
            x = layer(x)
        return ToyOutput(last_hidden_state=self.norm(x))

    class Normed(HFPreTrainedModel):
        config_class = ToyConfig
        _can_record_outputs = {"hidden_states": ToyLayer, "attentions": ToyAttention}

        def __init__(self, config: ToyConfig) -> None:
            super().__init__(config)
            self.layers = nn.ModuleList(ToyLayer() for _ in range(2))
            self.norm = nn.LayerNorm(TOY_DIM)
            self.post_init()

        forward = capture(normed_forward, tie_last_hidden_states=tie_last_hidden_states)

    return Normed
