"""TinyModel: a small decoder-only transformer, built in-process, used by the demo and the tests.

It is written the way transformers writes its base models (decorated `forward`, `_can_record_outputs`,
attention returning `(output, weights)`), so everything yamltrace does to it applies to those too.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from ..capture import capture_outputs
from ..modeling import BaseModelOutputWithPast, Config, PreTrainedModel, merge_with_config_defaults

__all__ = ["TinyConfig", "TinyAttention", "TinyMLP", "TinyDecoderLayer", "TinyModel"]


class TinyConfig(Config):
    """Config of `TinyModel`; the defaults build a model of about 50k parameters."""

    model_type = "yamltrace-tiny"
    num_hidden_layers: int  # always a count here (the base class allows None)

    def __init__(
        self,
        *,
        vocab_size: int = 128,
        hidden_size: int = 32,
        intermediate_size: int = 64,
        num_hidden_layers: int = 4,
        num_attention_heads: int = 4,
        rms_norm_eps: float = 1e-6,
        **kwargs: Any,
    ) -> None:
        super().__init__(num_hidden_layers=num_hidden_layers, **kwargs)
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_attention_heads = num_attention_heads
        self.rms_norm_eps = rms_norm_eps


class TinyAttention(nn.Module):
    """Causal multi-head self-attention that returns `(output, attention weights)`."""

    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.q_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.o_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        return x.view(batch, seq, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, hidden_states: torch.Tensor, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        q, k, v = (self._heads(p(hidden_states)) for p in (self.q_proj, self.k_proj, self.v_proj))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        seq = hidden_states.shape[1]
        causal = torch.ones(seq, seq, dtype=torch.bool, device=hidden_states.device).triu(1)
        weights = scores.masked_fill(causal, float("-inf")).softmax(dim=-1)
        out: torch.Tensor = self.o_proj((weights @ v).transpose(1, 2).reshape(hidden_states.shape))
        return out, weights


class TinyMLP(nn.Module):
    """Gated feed-forward block."""

    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))
        return out


class TinyDecoderLayer(nn.Module):
    """Pre-norm attention and MLP blocks with residuals; returns the new hidden state."""

    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.input_layernorm = nn.RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.self_attn = TinyAttention(config)
        self.post_attention_layernorm = nn.RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.mlp = TinyMLP(config)

    def forward(self, hidden_states: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        attn_out, _ = self.self_attn(self.input_layernorm(hidden_states), **kwargs)
        hidden_states = hidden_states + attn_out
        mlp_out: torch.Tensor = self.mlp(self.post_attention_layernorm(hidden_states))
        return hidden_states + mlp_out


class TinyModel(PreTrainedModel):
    """The embedded default model: embeddings, `num_hidden_layers` decoder layers, a final norm."""

    config_class = TinyConfig
    _can_record_outputs = {"hidden_states": TinyDecoderLayer, "attentions": TinyAttention}

    def __init__(self, config: TinyConfig) -> None:
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(TinyDecoderLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = nn.RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_init()

    @merge_with_config_defaults
    @capture_outputs
    def forward(self, input_ids: torch.Tensor, use_cache: bool | None = None, **kwargs: Any) -> BaseModelOutputWithPast:
        hidden_states = self.embed_tokens(input_ids)
        for layer in self.layers:
            hidden_states = layer(hidden_states, **kwargs)
        return BaseModelOutputWithPast(last_hidden_state=self.norm(hidden_states))
