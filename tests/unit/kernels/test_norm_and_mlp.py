"""RMSNorm, GemmaRMSNorm and GatedMLP without transformers: the formulas, what they adopt, what they refuse."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from yamltrace.kernels import (
    GatedMLP,
    GemmaRMSNorm,
    RMSNorm,
    UnsupportedModuleError,
    apply_rotary,
)


class LlamaStyleNorm(nn.Module):
    """transformers' LlamaRMSNorm, written out."""

    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden_size))
        self.variance_epsilon = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        return self.weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)).to(x.dtype)


class GemmaStyleNorm(nn.Module):
    """transformers' GemmaRMSNorm, written out."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps) * (1.0 + self.weight.float())).type_as(x)


class SwiGLU(nn.Module):
    def __init__(self, act: nn.Module, bias: bool = False) -> None:
        super().__init__()
        self.gate_proj, self.up_proj = nn.Linear(16, 24, bias=bias), nn.Linear(16, 24, bias=bias)
        self.down_proj = nn.Linear(24, 16, bias=bias)
        self.act_fn = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


@pytest.mark.parametrize("original, replacement", [(LlamaStyleNorm, RMSNorm), (GemmaStyleNorm, GemmaRMSNorm)])
def test_norms_equal_the_formula_and_share_the_weight(original, replacement):
    torch.manual_seed(0)
    norm = original(16, 1e-5)
    fast = replacement.from_module(norm)
    assert fast.weight is norm.weight
    x = torch.randn(3, 5, 16)
    torch.testing.assert_close(fast(x), norm(x), atol=1e-6, rtol=0)


def test_rms_norm_keeps_the_originals_dtype_promotion():
    norm = LlamaStyleNorm(16)  # float32 weight
    x = torch.randn(2, 16).bfloat16()
    assert RMSNorm.from_module(norm)(x).dtype == norm(x).dtype == torch.float32


@pytest.mark.parametrize(
    "original, replacement, message",
    [
        (
            GemmaStyleNorm(8),
            RMSNorm,
            r"its epsilon is in `eps`, as in the other RMSNorm family, .* use yamltrace\.kernels:GemmaRMSNorm",
        ),
        (LlamaStyleNorm(8), GemmaRMSNorm, r"its epsilon is in `variance_epsilon`, .* use yamltrace\.kernels:RMSNorm"),
        (nn.LayerNorm(8), RMSNorm, r"an RMSNorm has one 1-D `weight` parameter, this one has parameters \['bias', 'weight'\]"),
        (
            nn.Linear(8, 8),
            GemmaRMSNorm,
            r"an RMSNorm has one 1-D `weight` parameter, this one has parameters \['bias', 'weight'\]",
        ),
        (nn.ReLU(), RMSNorm, r"it is not shaped like an RMSNorm \(it has no weight\)"),
    ],
    ids=["gemma-as-llama", "llama-as-gemma", "layernorm", "linear", "relu"],
)
def test_norms_refuse_modules_they_would_compute_differently(original, replacement, message):
    with pytest.raises(UnsupportedModuleError, match=rf"{replacement.__name__} cannot replace .*{message}"):
        replacement.from_module(original)


def test_rms_norm_builds_from_the_originals_constructor():
    assert dict(RMSNorm(8, eps=1e-5).state_dict()).keys() == {"weight"}
    assert torch.equal(GemmaRMSNorm(dim=8).weight, torch.zeros(8)) and RMSNorm(hidden_size=8).variance_epsilon == 1e-6


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [((8,), {}), ((8, 1e-5), {}), ((), {"hidden_size": 8, "eps": 1e-5}), ((), {"dim": 8, "eps": 1e-5})],
    ids=["positional", "positional-eps", "hidden_size", "dim"],
)
def test_gemma_rms_norm_takes_the_size_under_each_releases_name(args, kwargs):
    """`hidden_size` (transformers 5.25 on) and `dim` (before) both build the same norm."""
    norm = GemmaRMSNorm(*args, **kwargs)
    assert torch.equal(norm.weight, torch.zeros(8)) and norm.eps == kwargs.get("eps", args[1] if len(args) > 1 else 1e-6)


@pytest.mark.parametrize(("kwargs", "given"), [({}, "neither"), ({"hidden_size": 8, "dim": 8}, "both")])
def test_gemma_rms_norm_refuses_neither_or_both_sizes(kwargs, given):
    with pytest.raises(TypeError, match=rf"takes the size as `hidden_size` \(or `dim`.*got {given}: pass one"):
        GemmaRMSNorm(**kwargs)


@pytest.mark.parametrize("act", [nn.SiLU(), nn.GELU(), nn.GELU(approximate="tanh")], ids=["silu", "gelu", "gelu_tanh"])
@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
def test_gated_mlp_identifies_the_activation_and_equals_the_original(act, grad):
    torch.manual_seed(0)
    mlp = SwiGLU(act, bias=True)
    fast = GatedMLP.from_module(mlp)
    x = torch.randn(2, 5, 16)
    with torch.set_grad_enabled(grad):
        torch.testing.assert_close(fast(x), mlp(x), atol=1e-6, rtol=0)


def test_gated_mlp_calls_projections_that_have_hooks():
    mlp = SwiGLU(nn.SiLU())
    seen = []
    mlp.up_proj.register_forward_hook(lambda module, args, output: seen.append(output.shape))
    x = torch.randn(2, 16)
    torch.testing.assert_close(GatedMLP.from_module(mlp)(x), mlp(x), atol=1e-6, rtol=0)
    assert seen == [(2, 24), (2, 24)]


@pytest.mark.parametrize(
    "original, message",
    [
        (SwiGLU(nn.ReLU()), r"its act_fn \(ReLU\) computes none of SiLU, GELU, GELU \(tanh\)"),
        (
            nn.Sequential(nn.Linear(4, 4)),
            r"not shaped like a gated MLP \(it has no act_fn, gate_proj, up_proj, down_proj; it has submodules the replacement would skip: 0\)",
        ),
    ],
    ids=["relu", "sequential"],
)
def test_gated_mlp_refuses_what_it_does_not_compute(original, message):
    with pytest.raises(UnsupportedModuleError, match=message):
        GatedMLP.from_module(original)


def test_gated_mlp_refuses_an_unknown_activation_in_a_config():
    config = type("Config", (), {"hidden_act": "relu", "model_type": "llama", "hidden_size": 8, "intermediate_size": 8})()
    with pytest.raises(
        UnsupportedModuleError, match=r"GatedMLP cannot replace an MLP of model_type 'llama': its activation 'relu' is none of"
    ):
        GatedMLP(config)


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


@pytest.mark.parametrize("rotary_dim", [8, 4], ids=["full", "partial"])
def test_apply_rotary_equals_transformers_formula(rotary_dim):
    torch.manual_seed(0)
    q, k = torch.randn(2, 4, 6, 8), torch.randn(2, 2, 6, 8)
    cos, sin = torch.randn(2, 6, rotary_dim), torch.randn(2, 6, rotary_dim)
    c, s = cos.unsqueeze(1), sin.unsqueeze(1)

    def reference(x):
        rot, rest = x[..., :rotary_dim], x[..., rotary_dim:]
        return torch.cat((rot * c + _rotate_half(rot) * s, rest), dim=-1)

    got_q, got_k = apply_rotary(q, k, cos, sin)
    torch.testing.assert_close(got_q, reference(q), atol=1e-6, rtol=0)
    torch.testing.assert_close(got_k, reference(k), atol=1e-6, rtol=0)
