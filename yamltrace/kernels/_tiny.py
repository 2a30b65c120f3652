"""`SdpaTinyAttention`: the demo model's attention computed with `scaled_dot_product_attention`."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from ..examples.tiny import TinyAttention
from ._adopt import UnsupportedModuleError, adopt

__all__ = ["SdpaTinyAttention"]


class SdpaTinyAttention(TinyAttention):
    """`yamltrace.examples.tiny.TinyAttention` computed with SDPA; returns `(output, None)`."""

    @classmethod
    def from_module(cls, original: nn.Module) -> SdpaTinyAttention:
        """The SDPA version of a built `TinyAttention`, sharing its projections."""
        if not isinstance(original, TinyAttention):
            raise UnsupportedModuleError(
                f"SdpaTinyAttention cannot replace {type(original).__module__}.{type(original).__qualname__}: it replaces "
                "yamltrace.examples.tiny.TinyAttention only. Patch TinyAttention with it, or see docs/kernels.md for the "
                "other replacements."
            )
        return adopt(cls, original)

    def forward(self, hidden_states: torch.Tensor, **kwargs: Any) -> tuple[torch.Tensor, None]:
        q, k, v = (self._heads(p(hidden_states)) for p in (self.q_proj, self.k_proj, self.v_proj))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(hidden_states.shape)), None
