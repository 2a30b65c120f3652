"""Attention modules computing with `torch.nn.functional.scaled_dot_product_attention` (SDPA).

Drop-in replacements to swap in with a patch mapping (`patches: {TinyAttention: yamltrace.kernels.
SdpaTinyAttention}` in a spec): same constructor, same parameter names, same output up to float
rounding. SDPA does not expose the attention probabilities, so both return `None` as the weights:
under capture, their `attentions` are an empty tuple (a `None` element is dropped, REFERENCE rule 3).
Each has a `from_module(original)` classmethod that shares the original's parameters, for `patch_model`.

`SdpaLlamaAttention` needs no import of transformers: it reads the config and the rotary embeddings
it is given, the way transformers' eager `LlamaAttention` does.
"""

from __future__ import annotations

from typing import Any, TypeVar

import torch
from torch import nn
from torch.nn import functional as F

from .examples.tiny import TinyAttention

__all__ = ["SdpaTinyAttention", "SdpaLlamaAttention"]

M = TypeVar("M", bound=nn.Module)


def _adopt(cls: type[M], original: nn.Module) -> M:
    """A new `cls` instance holding `original`'s submodules, parameters, buffers and plain attributes.

    Nothing is copied: the tensors are the original's own objects. Hooks registered on the original
    are not carried over.
    """
    new = cls.__new__(cls)
    nn.Module.__init__(new)
    for name, value in vars(original).items():
        if not name.startswith("_"):
            object.__setattr__(new, name, value)
    new._modules.update(original._modules)
    new._parameters.update(original._parameters)
    new._buffers.update(original._buffers)
    new._non_persistent_buffers_set.update(original._non_persistent_buffers_set)
    return new


class SdpaTinyAttention(TinyAttention):
    """`yamltrace.examples.tiny.TinyAttention` computed with SDPA; returns `(output, None)`."""

    @classmethod
    def from_module(cls, original: TinyAttention) -> SdpaTinyAttention:
        """The SDPA version of a built `TinyAttention`, sharing its projections."""
        return _adopt(cls, original)

    def forward(self, hidden_states: torch.Tensor, **kwargs: Any) -> tuple[torch.Tensor, None]:
        q, k, v = (self._heads(p(hidden_states)) for p in (self.q_proj, self.k_proj, self.v_proj))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(hidden_states.shape)), None


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _apply_rotary(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Llama's rotary position embedding, with `cos`/`sin` of shape (batch, seq, head_dim)."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


def _repeat_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    """(batch, kv_heads, seq, dim) -> (batch, kv_heads * groups, seq, dim) for grouped-query attention."""
    if groups == 1:
        return x
    batch, heads, seq, dim = x.shape
    return x[:, :, None].expand(batch, heads, groups, seq, dim).reshape(batch, heads * groups, seq, dim)


class SdpaLlamaAttention(nn.Module):
    """transformers' eager `LlamaAttention` computed with SDPA; returns `(output, None)`.

    Same constructor `(config, layer_idx)` and submodules (`q_proj`, `k_proj`, `v_proj`, `o_proj`), so
    it can be built in place of the original (`apply_patches`) or made from a built one (`from_module`).
    The attention mask is used as given (additive float or boolean "attend" mask, as transformers
    builds them); without one, attention is causal.
    """

    def __init__(self, config: Any, layer_idx: int) -> None:
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.scaling = self.head_dim**-0.5
        self.attention_dropout = config.attention_dropout
        self.is_causal = True
        bias = config.attention_bias
        q_size, kv_size = config.num_attention_heads * self.head_dim, config.num_key_value_heads * self.head_dim
        self.q_proj = nn.Linear(config.hidden_size, q_size, bias=bias)
        self.k_proj = nn.Linear(config.hidden_size, kv_size, bias=bias)
        self.v_proj = nn.Linear(config.hidden_size, kv_size, bias=bias)
        self.o_proj = nn.Linear(q_size, config.hidden_size, bias=bias)

    @classmethod
    def from_module(cls, original: nn.Module) -> SdpaLlamaAttention:
        """The SDPA version of a built `LlamaAttention` (or one shaped like it), sharing its projections."""
        missing = [n for n in ("q_proj", "k_proj", "v_proj", "o_proj", "head_dim", "num_key_value_groups", "scaling", "layer_idx") if not hasattr(original, n)]
        if missing:
            raise TypeError(f"{type(original).__qualname__} is not shaped like LlamaAttention: it has no {', '.join(missing)}.")
        return _adopt(cls, original)

    def forward(
        self,
        hidden_states: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        attention_mask: torch.Tensor | None = None,
        past_key_values: Any = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, None]:
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        q = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        k = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        v = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        if position_embeddings is None:
            raise ValueError("SdpaLlamaAttention needs position_embeddings (cos, sin), as LlamaAttention does.")
        q, k = _apply_rotary(q, k, *position_embeddings)
        if past_key_values is not None:
            k, v = past_key_values.update(k, v, self.layer_idx)
        k, v = _repeat_kv(k, self.num_key_value_groups), _repeat_kv(v, self.num_key_value_groups)
        q_len, k_len = q.shape[-2], k.shape[-2]
        mask = None if attention_mask is None else attention_mask[:, :, :, :k_len]
        if mask is None and q_len > 1 and q_len != k_len:
            mask = torch.ones(q_len, k_len, dtype=torch.bool, device=q.device).tril(k_len - q_len)
        out = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            dropout_p=self.attention_dropout if self.training else 0.0,
            scale=self.scaling,
            is_causal=mask is None and q_len > 1,
        )
        out = out.transpose(1, 2).reshape(*input_shape, -1).contiguous()
        return self.o_proj(out), None
