"""RMSNorm computed by `torch.nn.functional.rms_norm`: the Llama-style norm and Gemma's `1 + weight` one.

Two classes because the families differ in more than the name: Llama, Mistral, Qwen2/3, Phi3,
Mixtral and Qwen2-MoE scale by `weight` (initialised to ones, epsilon in `variance_epsilon`), Gemma
1/2/3 by `1 + weight` (initialised to zeros, epsilon in `eps`). Each checks that the module it adopts
keeps its epsilon under the attribute of its own family, so a Gemma norm is never adopted by
`RMSNorm` (which would silently drop the `+ 1`), nor the reverse.
"""

from __future__ import annotations

import numbers

import torch
from torch import nn
from torch.nn import functional as F

from ._adopt import adopt, refuse, require

__all__ = ["GemmaRMSNorm", "RMSNorm"]


def _check_norm(cls: type, original: nn.Module, epsilon: str, other: str, other_class: str) -> None:
    """`original` holds one 1-D `weight` parameter and a number under `epsilon` (not under `other`)."""
    require(cls, original, like="an RMSNorm", attributes=("weight",))
    weight = original._parameters.get("weight")
    if weight is None or weight.dim() != 1 or set(original._parameters) != {"weight"}:
        found = "no `weight` parameter" if weight is None else f"parameters {sorted(original._parameters)}"
        raise refuse(cls, original, f"an RMSNorm has one 1-D `weight` parameter, this one has {found}.")
    if hasattr(original, other) and not hasattr(original, epsilon):
        raise refuse(
            cls,
            original,
            f"its epsilon is in `{other}`, as in the other RMSNorm family, which scales differently; "
            f"use yamltrace.kernels:{other_class} for it.",
        )
    require(cls, original, like=f"an RMSNorm with `weight` and `{epsilon}`", attributes=(epsilon,))
    if not isinstance(getattr(original, epsilon), numbers.Real):
        raise refuse(cls, original, f"`{epsilon}` is {getattr(original, epsilon)!r}, not a number.")
    offset = getattr(original, "offset", 0.0)
    if offset not in (0, 0.0, None):
        raise refuse(cls, original, f"it adds an offset of {offset!r} to the weight, which {cls.__qualname__} does not.")


class RMSNorm(nn.Module):
    """`weight * x / sqrt(mean(x**2) + eps)` in one `F.rms_norm` call (Llama, Mistral, Qwen2/3, Phi3, Mixtral, Qwen2-MoE).

    Same constructor `(hidden_size, eps=1e-6)` and state (`weight`, `variance_epsilon`) as
    `LlamaRMSNorm`. In float32 it equals the original within 1e-5. In bfloat16 it rounds once where
    the original rounds twice (the normalised value, then the product), so it differs by up to one
    bfloat16 step (docs/kernels.md gives the tolerance).
    """

    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    @classmethod
    def from_module(cls, original: nn.Module) -> RMSNorm:
        """The `F.rms_norm` version of a built Llama-style RMSNorm, sharing its `weight`."""
        _check_norm(cls, original, "variance_epsilon", "eps", "GemmaRMSNorm")
        return adopt(cls, original)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if self.weight.dtype == hidden_states.dtype:
            return F.rms_norm(hidden_states, self.weight.shape, self.weight, self.variance_epsilon)
        # The original's `weight * normed.to(input dtype)` promotes to the weight's dtype: so does this.
        return self.weight * F.rms_norm(hidden_states, self.weight.shape, eps=self.variance_epsilon)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.variance_epsilon}"


class GemmaRMSNorm(nn.Module):
    """`(1 + weight) * x / sqrt(mean(x**2) + eps)` computed in float32 by one `F.rms_norm` call (Gemma 1/2/3).

    Same state (`weight` initialised to zeros, `eps`) as `GemmaRMSNorm`, and the constructor of every
    supported transformers release: `(hidden_size, eps=1e-6)` (5.25 on) and `(dim, eps=1e-6)` (before;
    `dim` by keyword). Like the original it computes in float32 and casts the result back once.
    """

    def __init__(self, hidden_size: int | None = None, eps: float = 1e-6, *, dim: int | None = None) -> None:
        size = hidden_size if dim is None else dim
        if size is None or (hidden_size is not None and dim is not None):
            given = "neither" if size is None else "both"
            raise TypeError(
                f"GemmaRMSNorm takes the size as `hidden_size` (or `dim`, its name before transformers 5.25), "
                f"got {given}: pass one, e.g. GemmaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)."
            )
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(size))

    @classmethod
    def from_module(cls, original: nn.Module) -> GemmaRMSNorm:
        """The `F.rms_norm` version of a built Gemma-style RMSNorm, sharing its `weight`."""
        _check_norm(cls, original, "eps", "variance_epsilon", "RMSNorm")
        return adopt(cls, original)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.weight.float() + 1.0
        return F.rms_norm(x.float(), self.weight.shape, scale, self.eps).type_as(x)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.eps}"
