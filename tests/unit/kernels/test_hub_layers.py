"""`forward_from`: forward-only kernel layers (the Hugging Face `kernels` hub contract) as spec-nameable replacements."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from yamltrace.errors import PatchError
from yamltrace.kernels import UnsupportedModuleError, forward_from
from yamltrace.patch import patch_model


class LlamaStyleNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden_size))
        self.variance_epsilon = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))


class HubRMSNorm(nn.Module):
    """A layer as the hub ships it: a forward and the attributes it reads, no __init__."""

    weight: torch.Tensor
    variance_epsilon: float

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(hidden_states, self.weight.shape, self.weight, self.variance_epsilon) + 0.0


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = LlamaStyleNorm(8)
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.norm(x))


HubRMSNormForLlamaStyleNorm = forward_from(HubRMSNorm, LlamaStyleNorm, module=__name__)
AdoptingHubNorm = forward_from(HubRMSNorm, name="AdoptingHubNorm", module=__name__)


def test_with_a_base_the_class_subclasses_it_and_patch_model_swaps_the_class():
    assert issubclass(HubRMSNormForLlamaStyleNorm, LlamaStyleNorm)
    assert (
        HubRMSNormForLlamaStyleNorm.__name__ == "HubRMSNormForLlamaStyleNorm"
        and HubRMSNormForLlamaStyleNorm.__module__ == __name__
    )
    torch.manual_seed(0)
    block, x = Block(), torch.randn(3, 8)
    expected = block(x)
    norm = block.norm
    with patch_model(block, {"LlamaStyleNorm": HubRMSNormForLlamaStyleNorm}) as handle:
        assert [(r.path, r.how) for r in handle.replaced] == [("norm", "class")]
        assert block.norm is norm and type(norm) is HubRMSNormForLlamaStyleNorm
        torch.testing.assert_close(block(x), expected, atol=1e-6, rtol=0)
    assert type(norm) is LlamaStyleNorm
    built = HubRMSNormForLlamaStyleNorm(8, eps=1e-5)  # the original's constructor: apply_patches can build it
    assert built.variance_epsilon == 1e-5


def test_without_a_base_from_module_adopts_a_module_with_the_declared_attributes():
    torch.manual_seed(0)
    block, x = Block(), torch.randn(3, 8)
    expected, weight = block(x), block.norm.weight
    with patch_model(block, {"LlamaStyleNorm": AdoptingHubNorm}) as handle:
        assert [r.how for r in handle.replaced] == ["from_module"]
        assert type(block.norm) is AdoptingHubNorm and block.norm.weight is weight
        torch.testing.assert_close(block(x), expected, atol=1e-6, rtol=0)


def test_without_a_base_a_module_missing_a_declared_attribute_is_refused_with_its_path():
    block = Block()
    block.norm = nn.LayerNorm(8)
    with pytest.raises(
        PatchError,
        match=r"norm: AdoptingHubNorm\.from_module failed: AdoptingHubNorm cannot replace torch\.nn\.modules\.normalization\.LayerNorm: it is not shaped like what HubRMSNorm reads \(it has no variance_epsilon\)",
    ):
        patch_model(block, {"LayerNorm": AdoptingHubNorm})
    assert type(block.norm) is nn.LayerNorm


def test_forward_from_refuses_a_layer_with_state_of_its_own():
    with pytest.raises(TypeError, match=r"Linear defines __init__: a hub layer computes with the replaced module's state only"):
        forward_from(nn.Linear)
    with pytest.raises(TypeError, match="forward_from takes an nn.Module class that defines forward"):
        forward_from(object)  # type: ignore[arg-type]


def test_unsupported_module_error_reaches_the_caller_of_from_module():
    with pytest.raises(UnsupportedModuleError):
        AdoptingHubNorm.from_module(nn.ReLU())
