"""The gated MLP (SwiGLU with SiLU, GeGLU with GELU) as one expression of `F.linear` calls.

`down(act(gate(x)) * up(x))` is what Llama, Mistral, Qwen2/3, Gemma 1/2/3 and Qwen2-MoE's shared
expert compute, and Phi3 with its gate and up projections fused in one `gate_up_proj`. The
replacement calls `F.linear` on the original's weights directly (no module calls, and without
gradients the activation and the product are done in place), and falls back to calling the
projections when one has hooks or is not a plain `nn.Linear` (a quantized or LoRA layer), so
nothing that observes or changes the projections is skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from ._adopt import adopt, plain_linear, refuse, require

__all__ = ["GatedMLP"]

# The activations a gated MLP may use, by transformers' `hidden_act` names.
_ACTIVATIONS: dict[str, str] = {
    "silu": "silu",
    "swish": "silu",
    "gelu": "gelu",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_new": "gelu_tanh",
}
_FUNCTIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "silu": F.silu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
}
# Model types whose MLP holds the gate and up projections in one `gate_up_proj` (gate first).
_FUSED_GATE_UP = frozenset({"phi3"})


def _identify(activation: nn.Module) -> str | None:
    """Which of the supported activations `activation` computes, by evaluating it on a fixed probe."""
    probe = torch.linspace(-8.0, 8.0, 161, dtype=torch.float64)
    with torch.no_grad():
        try:
            values = activation(probe)
        except (RuntimeError, TypeError, ValueError):  # not an elementwise activation of one tensor
            return None
        for name, function in _FUNCTIONS.items():
            if isinstance(values, torch.Tensor) and torch.allclose(values, function(probe), atol=1e-6, rtol=0):
                return name
    return None


class GatedMLP(nn.Module):
    """`down_proj(act(gate_proj(x)) * up_proj(x))` in one expression; `act` is SiLU, GELU or GELU (tanh).

    Constructor `(config, intermediate_size=None)` like `LlamaMLP(config)` and
    `Qwen2MoeMLP(config, intermediate_size)`, with the same parameter names; for `model_type` "phi3"
    it builds Phi3's fused `gate_up_proj`. `from_module` adopts either layout and identifies the
    activation by evaluating the original's `act_fn` (or `activation_fn`).
    """

    def __init__(self, config: Any, intermediate_size: int | None = None) -> None:
        super().__init__()
        name = getattr(config, "hidden_activation", None) or getattr(config, "hidden_act", None)
        if name not in _ACTIVATIONS:
            raise refuse(
                type(self),
                f"an MLP of model_type {getattr(config, 'model_type', None)!r}",
                f"its activation {name!r} is none of {sorted(_ACTIVATIONS)}.",
            )
        self.config = config
        self.hidden_size = config.hidden_size
        self.intermediate_size = intermediate_size or config.intermediate_size
        self.activation = _ACTIVATIONS[name]
        bias = getattr(config, "mlp_bias", False)
        if getattr(config, "model_type", None) in _FUSED_GATE_UP:
            self.gate_up_proj = nn.Linear(self.hidden_size, 2 * self.intermediate_size, bias=bias)
        else:
            self.gate_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=bias)
            self.up_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=bias)
        self.down_proj = nn.Linear(self.intermediate_size, self.hidden_size, bias=bias)

    @classmethod
    def from_module(cls, original: nn.Module) -> GatedMLP:
        """The one-expression version of a built gated MLP, sharing its projections."""
        act_name = "activation_fn" if hasattr(original, "activation_fn") else "act_fn"
        linears = ("gate_up_proj", "down_proj") if hasattr(original, "gate_up_proj") else ("gate_proj", "up_proj", "down_proj")
        require(cls, original, like="a gated MLP", attributes=(act_name,), linears=linears, allowed_children=(act_name,))
        activation = _identify(getattr(original, act_name))
        if activation is None:
            raise refuse(
                cls,
                original,
                f"its {act_name} ({type(getattr(original, act_name)).__name__}) computes none of SiLU, GELU, GELU (tanh).",
            )
        new = adopt(cls, original)
        new.activation = activation
        return new

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        fused = "gate_up_proj" in self._modules
        projections = (self.gate_up_proj,) if fused else (self.gate_proj, self.up_proj)
        if not plain_linear(*projections, self.down_proj):
            if fused:
                gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
            else:
                gate, up = self.gate_proj(x), self.up_proj(x)
            out: torch.Tensor = self.down_proj(_FUNCTIONS[self.activation](gate) * up)
            return out
        if fused:
            gate, up = F.linear(x, self.gate_up_proj.weight, self.gate_up_proj.bias).chunk(2, dim=-1)
        else:
            gate, up = (
                F.linear(x, self.gate_proj.weight, self.gate_proj.bias),
                F.linear(x, self.up_proj.weight, self.up_proj.bias),
            )
        if self.activation == "silu" and not torch.is_grad_enabled() and not fused:
            hidden = F.silu(gate, inplace=True).mul_(up)
        else:
            hidden = _FUNCTIONS[self.activation](gate) * up
        return F.linear(hidden, self.down_proj.weight, self.down_proj.bias)
