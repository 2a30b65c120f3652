"""A replacement whose forward cannot be called as the original's is (a required argument the callers
never pass, fewer positional arguments, a missing keyword or `**kwargs`) is refused before anything
changes, naming both forwards and the fix; `forward_differences` lists deliberate differences."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import refusal
import torch
from torch import nn

import yamltrace
from yamltrace.checkpoint import save_pretrained
from yamltrace.errors import PatchError
from yamltrace.examples.tiny import TinyMLP, TinyModel
from yamltrace.patch import apply_patches, patch_model


class Original(nn.Module):
    def forward(self, x, mask=None, *, scale=1.0, **kwargs):
        return x


class NeedsResidual(nn.Module):
    def forward(self, x, residual, mask=None, *, scale=1.0, **kwargs):
        return x + residual


class FewerPositional(nn.Module):
    def forward(self, x, *, mask=None, scale=1.0, **kwargs):
        return x


class NoScale(nn.Module):
    def forward(self, x, mask=None):
        return x


class NoKwargs(nn.Module):
    def forward(self, x, mask=None, *, scale=1.0):
        return x


class RenamedInput(nn.Module):
    def forward(self, hidden_states, mask=None, *, scale=1.0, **kwargs):
        return hidden_states


class Deliberate(NeedsResidual):
    forward_differences = frozenset({"residual"})


class DeliberatelyFewer(nn.Module):
    forward_differences = frozenset({"mask", "scale", "**kwargs"})

    def forward(self, x):
        return x


@pytest.mark.parametrize(
    ("replacement", "why"),
    [
        (NeedsResidual, r"forward\(x, mask=\.\.\., scale=\.\.\.\): missing a required argument: 'residual'"),
        (FewerPositional, r"forward\(x, mask, scale=\.\.\.\): too many positional arguments"),
        (NoScale, r"got an unexpected keyword argument 'scale'"),
        (NoKwargs, r"the original takes \*\*kwargs, which its callers may fill; the replacement has none"),
    ],
)
def test_a_forward_that_cannot_be_called_as_the_original_is_refused(replacement, why) -> None:
    problem = refusal(Original, replacement)
    assert problem is not None and re.search(why, problem), problem
    assert problem.startswith(f"{__name__}.{replacement.__qualname__}.forward(")
    assert f"cannot be called as {__name__}.Original.forward(x, mask=None, *, scale=1.0, **kwargs) is" in problem
    assert "list the parameters in the class attribute `forward_differences`" in problem


@pytest.mark.parametrize("replacement", [Original, RenamedInput, Deliberate, DeliberatelyFewer])
def test_matching_forwards_a_renamed_input_and_listed_differences_pass(replacement) -> None:
    assert refusal(Original, replacement) is None


class ResidualMLP(TinyMLP):
    """TinyMLP whose forward needs an argument no decoder layer passes."""

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return super().forward(x) + residual


def test_patch_model_refuses_it_naming_the_module_and_changes_nothing(tiny: TinyModel) -> None:
    before = [type(m) for m in tiny.modules()]
    with pytest.raises(PatchError, match=r"^layers\.0\.mlp: .*ResidualMLP\.forward\(x, residual\) cannot be called as "):
        patch_model(tiny, {"TinyMLP": ResidualMLP})
    assert [type(m) for m in tiny.modules()] == before


def test_a_load_with_the_patch_refuses_it_before_building(tiny: TinyModel, tmp_path: Path) -> None:
    folder = save_pretrained(tiny, tmp_path / "ckpt")
    with pytest.raises(PatchError, match=r"ResidualMLP\.forward\(x, residual\) cannot be called as .*TinyMLP\.forward\(x\)"):
        yamltrace.from_pretrained(TinyModel, folder, overrides={"patches": {"TinyMLP": f"{__name__}:ResidualMLP"}})
    with pytest.raises(PatchError, match=r"missing a required argument: 'residual'"):
        with apply_patches({"TinyMLP": ResidualMLP}, modules=TinyModel):
            pass
