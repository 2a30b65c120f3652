"""`DiffusersEagerAttention`: diffusers' `Attention` computed eagerly, its probabilities through a submodule.

diffusers computes attention inside a processor function (`AttnProcessor2_0`: one
`scaled_dot_product_attention` call), so no module ever returns the probabilities. This replacement
is diffusers' `Attention` (same constructor, same parameters and buffers) whose forward computes what
the default processors compute, with the softmax written out and the probabilities, `[batch, heads,
query, key]`, passed through `self.attn_probs` (an `AttentionProbabilities`, which holds no state):
recorders capture them there, and interventions edit them before they weigh the values.

Supported: the attention of diffusers' transformer blocks (UNet2DConditionModel's `attn1` and
`attn2`, Transformer2DModel): self- or cross-attention, 3-D or 4-D inputs, group norm, cross norm,
per-head q/k norms, attention masks, residual and rescaled outputs. Refused, naming the setting:
added key/value projections, spatial norms, grouped key/value heads, `pre_only` and
`context_pre_only` attention, and a processor other than diffusers' default (`AttnProcessor2_0`,
`AttnProcessor`), which this forward would silently bypass. Imports diffusers.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from diffusers.models.attention_processor import Attention, AttnProcessor, AttnProcessor2_0
from torch import nn

from ._adopt import UnsupportedModuleError, adopt
from ._probs import AttentionProbabilities

__all__ = ["DiffusersEagerAttention"]

_DEFAULT_PROCESSORS = (AttnProcessor2_0, AttnProcessor)


def _unsupported(module: nn.Module) -> list[str]:
    """The settings of a diffusers `Attention` that this forward does not compute."""
    found = []
    if getattr(module, "added_kv_proj_dim", None) is not None:
        found.append(f"added_kv_proj_dim={module.added_kv_proj_dim} (added key/value projections)")
    if getattr(module, "spatial_norm", None) is not None:
        found.append("spatial_norm_dim (a spatial norm)")
    if getattr(module, "inner_kv_dim", None) != getattr(module, "inner_dim", None):
        found.append("kv_heads (grouped key/value heads)")
    if getattr(module, "pre_only", False) or getattr(module, "context_pre_only", None) is not None:
        found.append("pre_only / context_pre_only (joint attention)")
    return found


def _refusal(module: nn.Module, reasons: list[str]) -> UnsupportedModuleError:
    cls = type(module)
    return UnsupportedModuleError(
        f"DiffusersEagerAttention cannot replace {cls.__module__}.{cls.__qualname__}: it does not compute "
        f"{'; '.join(reasons)}. Keep diffusers' Attention for these modules: patch only the models whose attention "
        "has none of these (UNet2DConditionModel, Transformer2DModel), or select modules by pattern."
    )


class DiffusersEagerAttention(Attention):
    """diffusers' `Attention` with eager attention; the probabilities pass through `self.attn_probs`."""

    @functools.wraps(Attention.__init__)  # type: ignore[misc]  # the original's signature, for apply_patches
    def __init__(self, *args: Any, **kwargs: Any) -> None:  # the original's constructor (apply_patches)
        super().__init__(*args, **kwargs)
        reasons = _unsupported(self)
        if reasons:
            raise _refusal(self, reasons)
        self.attn_probs = AttentionProbabilities()

    @classmethod
    def from_module(cls, original: nn.Module) -> DiffusersEagerAttention:
        """The eager version of a built diffusers `Attention`, sharing its parameters (patch_model)."""
        if not isinstance(original, Attention):
            raise UnsupportedModuleError(
                f"DiffusersEagerAttention cannot replace {type(original).__module__}.{type(original).__qualname__}: it "
                "replaces diffusers.models.attention_processor.Attention only. Patch the key '^Attention$' with it."
            )
        reasons = _unsupported(original)
        if not isinstance(getattr(original, "processor", None), _DEFAULT_PROCESSORS):
            reasons.append(f"its processor {type(getattr(original, 'processor', None)).__name__}")
        if reasons:
            raise _refusal(original, reasons)
        new = adopt(cls, original)
        new._from_deprecated_attn_block = original._from_deprecated_attn_block
        new.attn_probs = AttentionProbabilities()
        return new

    def forward(
        self,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        **cross_attention_kwargs: Any,
    ) -> torch.Tensor:
        """What `AttnProcessor2_0` returns, computed eagerly (the `cross_attention_kwargs` it would ignore are ignored)."""
        if not isinstance(self.processor, _DEFAULT_PROCESSORS):
            raise RuntimeError(
                f"DiffusersEagerAttention computes diffusers' default attention itself, but this module's processor was "
                f"set to {type(self.processor).__name__} (set_attn_processor), which it would bypass. Undo the patch "
                "(handle.remove()) before setting another processor."
            )
        residual = hidden_states
        spatial = hidden_states.shape if hidden_states.ndim == 4 else None
        if spatial is not None:
            hidden_states = hidden_states.flatten(2).transpose(1, 2)
        batch = (hidden_states if encoder_hidden_states is None else encoder_hidden_states).shape[0]
        if self.group_norm is not None:
            hidden_states = self.group_norm(hidden_states.transpose(1, 2)).transpose(1, 2)
        if encoder_hidden_states is None:
            encoder_hidden_states = hidden_states
        elif self.norm_cross:
            encoder_hidden_states = self.norm_encoder_hidden_states(encoder_hidden_states)
        query, key, value = self.to_q(hidden_states), self.to_k(encoder_hidden_states), self.to_v(encoder_hidden_states)
        query, key, value = (t.unflatten(-1, (self.heads, -1)).transpose(1, 2) for t in (query, key, value))
        if self.norm_q is not None:
            query = self.norm_q(query)
        if self.norm_k is not None:
            key = self.norm_k(key)
        dtype = query.dtype
        if self.upcast_attention:
            query, key = query.float(), key.float()
        scores = (query @ key.transpose(-1, -2)) * self.scale
        if attention_mask is not None:
            mask = self.prepare_attention_mask(attention_mask, key.shape[2], batch)
            mask = mask.view(batch, self.heads, -1, mask.shape[-1])
            scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
        if self.upcast_softmax:
            scores = scores.float()
        probabilities = self.attn_probs(scores.softmax(dim=-1).to(dtype))
        hidden_states = (probabilities @ value).transpose(1, 2).flatten(2).to(dtype)
        hidden_states = self.to_out[1](self.to_out[0](hidden_states))
        if spatial is not None:
            hidden_states = hidden_states.transpose(-1, -2).reshape(spatial)
        if self.residual_connection:
            hidden_states = hidden_states + residual
        return torch.div(hidden_states, self.rescale_output_factor)
