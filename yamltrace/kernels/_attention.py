"""Grouped-query self-attention computed with `torch.nn.functional.scaled_dot_product_attention` (SDPA).

`SdpaAttention` replaces the eager attention of the decoder families in docs/kernels.md: separate or
fused (`qkv_proj`, Phi3) projections with whatever biases the original has (Qwen2: on q/k/v, not on
o), optional per-head `q_norm`/`k_norm` (Qwen3, Gemma3), grouped-query heads (SDPA's `enable_gqa`,
no repeated keys), rotary embeddings (`apply_rotary`), sliding windows, the KV cache and the masks
transformers builds. The cache comes as `cache` (transformers 5.24.0 on) or `past_key_values` (before, and
5.24.0's deprecated name). It refuses what SDPA cannot compute: attention-logit soft-capping (Gemma2).

SDPA does not expose the attention probabilities, so the weights returned are `None`: under capture,
`attentions` is an empty tuple (a `None` element is dropped for every key but `hidden_states`, docs/semantics.md).

Importing this module does not import transformers: the replacement reads the config and the rotary
tables it is given, the way transformers' eager attention modules do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from ..modeling import CacheNameError
from ._adopt import adopt, refuse, require
from ._norm import GemmaRMSNorm, RMSNorm
from ._rotary import apply_rotary

__all__ = ["SdpaAttention", "SdpaLlamaAttention"]


@dataclass(frozen=True)
class _Family:
    """How a family's attention is built from its config (for construction in place of the original)."""

    qkv_bias: str | bool  # a config attribute naming the bias of q/k/v, or a constant
    o_bias: str | bool
    qk_norm: type[nn.Module] | None = None
    scaling: str = "head_dim"  # or "query_pre_attn_scalar"
    window: str | None = None  # "layer_types": per layer; "config": config.sliding_window for every layer
    fused_qkv: bool = False


FAMILIES: dict[str, _Family] = {
    "llama": _Family("attention_bias", "attention_bias"),
    "mistral": _Family(False, False, window="config"),
    "mixtral": _Family(False, False, window="config"),
    "qwen2": _Family(True, False, window="layer_types"),
    "qwen2_moe": _Family("qkv_bias", False, window="layer_types"),
    "qwen3": _Family("attention_bias", "attention_bias", qk_norm=RMSNorm, window="layer_types"),
    "gemma": _Family("attention_bias", "attention_bias"),
    "gemma2": _Family("attention_bias", "attention_bias", scaling="query_pre_attn_scalar", window="layer_types"),
    "gemma3_text": _Family(
        "attention_bias", "attention_bias", qk_norm=GemmaRMSNorm, scaling="query_pre_attn_scalar", window="layer_types"
    ),
    "phi3": _Family(False, False, window="config", fused_qkv=True),
}
# Families whose attention module passes `config.sliding_window` to every layer (it has no attribute of its own).
_CONFIG_WINDOW = frozenset(name for name, family in FAMILIES.items() if family.window == "config")
_KNOWN_CHILDREN = ("q_norm", "k_norm")


def _config_value(config: Any, value: str | bool) -> Any:
    return getattr(config, value) if isinstance(value, str) else value


def _sliding_window(config: Any, layer_idx: int, family: _Family) -> int | None:
    if family.window == "config":
        return getattr(config, "sliding_window", None)
    if family.window == "layer_types" and getattr(config, "layer_types", None) is not None:
        return config.sliding_window if config.layer_types[layer_idx] == "sliding_attention" else None
    return None


class SdpaAttention(nn.Module):
    """Eager decoder self-attention computed with SDPA; returns `(output, None)`.

    Constructor `(config, layer_idx)` like the originals (for `apply_patches` and `from_pretrained`);
    the layout is taken from `config.model_type` (`FAMILIES`). `from_module` adopts a built attention
    of any of these families by its structure and shares its projections and norms.
    """

    def __init__(self, config: Any, layer_idx: int) -> None:
        super().__init__()
        model_type: str | None = getattr(config, "model_type", None)
        family = None if model_type is None else FAMILIES.get(model_type)
        what = f"the attention of model_type {model_type!r}"
        if family is None:
            raise refuse(type(self), what, f"supported model types are {', '.join(sorted(FAMILIES))}.")
        _refuse_softcap(type(self), what, getattr(config, "attn_logit_softcapping", None))
        self.config, self.layer_idx = config, layer_idx
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.scaling = (config.query_pre_attn_scalar if family.scaling == "query_pre_attn_scalar" else self.head_dim) ** -0.5
        self.attention_dropout = config.attention_dropout
        self.is_causal = not getattr(config, "use_bidirectional_attention", False)
        self.sliding_window = _sliding_window(config, layer_idx, family)
        q_size, kv_size = config.num_attention_heads * self.head_dim, config.num_key_value_heads * self.head_dim
        qkv_bias, o_bias = _config_value(config, family.qkv_bias), _config_value(config, family.o_bias)
        if family.fused_qkv:
            self.num_key_value_heads = config.num_key_value_heads
            self.qkv_proj = nn.Linear(config.hidden_size, q_size + 2 * kv_size, bias=qkv_bias)
        else:
            self.q_proj = nn.Linear(config.hidden_size, q_size, bias=qkv_bias)
            self.k_proj = nn.Linear(config.hidden_size, kv_size, bias=qkv_bias)
            self.v_proj = nn.Linear(config.hidden_size, kv_size, bias=qkv_bias)
        self.o_proj = nn.Linear(q_size, config.hidden_size, bias=o_bias)
        if family.qk_norm is not None:
            self.q_norm = family.qk_norm(self.head_dim, eps=config.rms_norm_eps)
            self.k_norm = family.qk_norm(self.head_dim, eps=config.rms_norm_eps)

    @classmethod
    def from_module(cls, original: nn.Module) -> SdpaAttention:
        """The SDPA version of a built eager attention of a supported family, sharing its submodules."""
        fused = hasattr(original, "qkv_proj")
        linears = ("qkv_proj", "o_proj") if fused else ("q_proj", "k_proj", "v_proj", "o_proj")
        attributes = ("head_dim", "num_key_value_groups", "scaling", "layer_idx", "attention_dropout")
        require(
            cls,
            original,
            like="a decoder self-attention",
            attributes=attributes,
            linears=linears,
            allowed_children=_KNOWN_CHILDREN,
        )
        _refuse_softcap(cls, original, getattr(original, "attn_logit_softcapping", None))
        if hasattr(original, "q_norm") != hasattr(original, "k_norm"):
            raise refuse(cls, original, "it has only one of q_norm and k_norm.")
        new = adopt(cls, original)
        if not hasattr(original, "sliding_window"):
            config = getattr(original, "config", None)
            new.sliding_window = (
                getattr(config, "sliding_window", None) if getattr(config, "model_type", None) in _CONFIG_WINDOW else None
            )
        new.is_causal = getattr(original, "is_causal", True)
        return new

    def _project(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries, keys and values as (batch, heads, seq, head_dim), q/k normalised when the family does."""
        hidden_shape = (*hidden_states.shape[:-1], -1, self.head_dim)
        if "qkv_proj" in self._modules:
            qkv = self.qkv_proj(hidden_states)
            kv_size = qkv.shape[-1] // (self.num_key_value_groups + 2)
            q, k, v = qkv.split((qkv.shape[-1] - 2 * kv_size, kv_size, kv_size), dim=-1)
        else:
            q, k, v = self.q_proj(hidden_states), self.k_proj(hidden_states), self.v_proj(hidden_states)
        q, k, v = q.view(hidden_shape), k.view(hidden_shape), v.view(hidden_shape)
        if "q_norm" in self._modules:
            q, k = self.q_norm(q), self.k_norm(k)
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

    def _default_mask(self, q_len: int, k_len: int, device: torch.device) -> torch.Tensor | None:
        """The mask transformers would build with no padding: causal (bottom-right aligned) and windowed."""
        if not self.is_causal:
            return None
        if self.sliding_window is None and (q_len == k_len or q_len == 1):
            return None  # SDPA's is_causal (or nothing for one query) is exactly this mask
        rows = torch.arange(k_len - q_len, k_len, device=device)[:, None]
        cols = torch.arange(k_len, device=device)[None, :]
        allowed = cols <= rows
        if self.sliding_window is not None:
            allowed &= cols > rows - self.sliding_window
        return allowed

    def forward(
        self,
        hidden_states: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        attention_mask: torch.Tensor | None = None,
        cache: Any = None,
        past_key_values: Any = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, None]:
        """Attend; the KV cache is `cache` or, under its older name, `past_key_values` (one of them)."""
        if position_embeddings is None:
            raise ValueError(f"{type(self).__name__} needs position_embeddings (cos, sin), as the eager attention does.")
        q, k, v = self._project(hidden_states)
        q, k = apply_rotary(q, k, *position_embeddings)
        cache = _one_cache(cache, past_key_values)
        if cache is not None:
            k, v = cache.update(k, v, self.layer_idx)
        q_len, k_len = q.shape[-2], k.shape[-2]
        mask: torch.Tensor | None
        if attention_mask is not None:
            mask = attention_mask[:, :, :, :k_len]
        else:
            mask = self._default_mask(q_len, k_len, q.device)
        out = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            dropout_p=self.attention_dropout if self.training else 0.0,
            scale=self.scaling,
            is_causal=mask is None and attention_mask is None and self.is_causal and q_len > 1,
            enable_gqa=self.num_key_value_groups > 1,
        )
        out = out.transpose(1, 2).reshape(*hidden_states.shape[:-1], -1)
        return self.o_proj(out), None


def _one_cache(cache: Any, past_key_values: Any) -> Any:
    """The cache passed under either name; two different ones are a `CacheNameError`."""
    if past_key_values is None or past_key_values is cache:
        return cache
    if cache is not None:
        raise CacheNameError("SdpaAttention was given two caches, `cache` and `past_key_values`: pass one, as `cache`.")
    return past_key_values


def _refuse_softcap(cls: type, what: nn.Module | str, softcap: float | None) -> None:
    if softcap is not None:
        raise refuse(
            cls,
            what,
            f"it soft-caps the attention logits (attn_logit_softcapping={softcap}), which scaled_dot_product_attention "
            "cannot do. Keep the eager attention for it, or set attn_logit_softcapping to None in the config "
            "(that changes the model's outputs).",
        )


class SdpaLlamaAttention(SdpaAttention):
    """`SdpaAttention` under the name earlier specs use (`LlamaAttention: yamltrace.kernels:SdpaLlamaAttention`).

    It is the same replacement, so it also serves the other families in `FAMILIES`.
    """
