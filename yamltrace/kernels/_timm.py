"""`TimmEagerAttention`: timm's ViT `Attention` on its eager path, so its probabilities pass through `attn_drop`.

timm's `Attention` computes attention with `scaled_dot_product_attention` when `fused_attn` is set
(the default, `timm.layers.use_fused_attn()`): its `attn_drop` module then never runs, and a recorder
of the probabilities on it captures nothing. This replacement is the same class with `fused_attn`
off: its forward is timm's own, whose eager branch passes the softmax probabilities through
`attn_drop` (an identity at inference). It holds exactly the original's state. Imports timm.
"""

from __future__ import annotations

import functools
from typing import Any

from timm.layers.attention import Attention
from torch import nn

from ._adopt import UnsupportedModuleError, adopt

__all__ = ["TimmEagerAttention"]


class TimmEagerAttention(Attention):
    """`timm.layers.Attention` with `fused_attn = False`: the probabilities run through `attn_drop`."""

    @functools.wraps(Attention.__init__)  # type: ignore[misc]  # the original's signature, for apply_patches
    def __init__(self, *args: Any, **kwargs: Any) -> None:  # the original's constructor (apply_patches)
        super().__init__(*args, **kwargs)
        object.__setattr__(self, "fused_attn", False)  # timm's annotation is Final: set once, here

    @classmethod
    def from_module(cls, original: nn.Module) -> TimmEagerAttention:
        """The eager version of a built `timm.layers.Attention`, sharing its parameters (patch_model)."""
        if type(original) is not Attention and not isinstance(original, cls):
            raise UnsupportedModuleError(
                f"TimmEagerAttention cannot replace {type(original).__module__}.{type(original).__qualname__}: it "
                "replaces timm.layers.Attention only (other timm attentions have their own forward). Patch the key "
                "'^Attention$' with it, or keep the original class."
            )
        new = adopt(cls, original)
        object.__setattr__(new, "fused_attn", False)
        return new
