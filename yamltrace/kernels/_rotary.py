"""Rotary position embeddings (the half-split layout of transformers' `apply_rotary_pos_emb`) in fewer kernels.

transformers rotates with `x * cos + rotate_half(x) * sin`, where `rotate_half` slices, negates and
concatenates: five kernels per tensor. Here the sign of `rotate_half` moves into `sin` (once per call,
on the small `(batch, seq, dim)` table), the halves are swapped by one `roll`, and the multiply-add is
one `addcmul`: three kernels per tensor, the same values (negation and the swap are exact). A
`cos` narrower than the head (partial rotary, as Phi3 allows) rotates the leading dimensions only.
"""

from __future__ import annotations

import torch

__all__ = ["apply_rotary"]


def _signed_sin(sin: torch.Tensor) -> torch.Tensor:
    half = sin.shape[-1] // 2
    return torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)


def _rotate(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    dim = cos.shape[-1]
    if dim == x.shape[-1]:
        return torch.addcmul(x * cos, x.roll(dim // 2, dims=-1), signed_sin)
    rotated, passed = x[..., :dim], x[..., dim:]
    return torch.cat((torch.addcmul(rotated * cos, rotated.roll(dim // 2, dims=-1), signed_sin), passed), dim=-1)


def apply_rotary(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate `q` and `k` (batch, heads, seq, head_dim) by `cos`/`sin` (batch, seq, rotary_dim), as transformers does."""
    cos, signed_sin = cos.unsqueeze(1), _signed_sin(sin).unsqueeze(1)
    return _rotate(q, cos, signed_sin), _rotate(k, cos, signed_sin)
