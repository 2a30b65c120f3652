"""A replacement never silently swallows a keyword the replaced forward names: `from_module`, `patch_model`
and `apply_patches` refuse it, naming the parameter; the shipped attention takes the cache under both names."""

from __future__ import annotations

import functools
import re
import sys
import types
from types import SimpleNamespace
from typing import Any

import pytest
from helpers import refusal
import torch
from torch import nn

from yamltrace.errors import PatchError
from yamltrace.examples.tiny import TinyAttention, TinyConfig
from yamltrace.kernels import SdpaAttention, SdpaTinyAttention, UnsupportedModuleError
from yamltrace.modeling import CacheNameError
from yamltrace.patch import apply_patches, patch_model


class Original(nn.Module):
    def forward(self, hidden_states, attention_mask=None, cache=None, *, scale=1.0, **kwargs):
        return hidden_states


class Swallows(nn.Module):
    def forward(self, hidden_states, attention_mask=None, **kwargs):
        return hidden_states


class Strict(nn.Module):
    def forward(self, hidden_states, attention_mask=None):
        return hidden_states


class Handles(Swallows):
    handled_kwargs = frozenset({"cache", "scale"})


class PassThrough(nn.Module):
    def forward(self, *args, **kwargs):
        return args[0]


class Renamed(nn.Module):
    def forward(self, x, attention_mask=None, cache=None, scale=1.0, **kwargs):
        return x


def deprecating(forward):
    """A decorator like transformers' `deprecate_kwarg`: a `(*args, **kwargs)` wrapper over the forward."""

    @functools.wraps(forward)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if "past_key_values" in kwargs:
            kwargs["cache"] = kwargs.pop("past_key_values")
        return forward(*args, **kwargs)

    return wrapper


class Decorated(nn.Module):
    @deprecating
    def forward(self, hidden_states, cache=None, **kwargs):
        return hidden_states


def ignored_keywords(original: type, replacement: type) -> list[str]:
    """The keywords of `original.forward` that `apply_patches` says `replacement.forward` would silently
    ignore, in the original's order; [] when it names none.

    Keywords are judged before the forward's calls, so a refusal for a call (a TypeError the callers
    would see) means no keyword would be ignored."""
    problem = refusal(original, replacement)
    if problem is None:
        return []
    ignoring = f"{replacement.__module__}.{replacement.__qualname__}.forward would silently ignore "
    if not problem.startswith(ignoring):
        assert " cannot be called as " in problem, problem
        return []
    return re.findall(r"`(\w+)`", problem[len(ignoring) :].split(": ", 1)[0])


@pytest.mark.parametrize(
    ("original", "replacement", "ignored"),
    [
        (Original, Swallows, ["cache", "scale"]),
        (Original, Strict, []),  # no **kwargs: an unknown keyword is a TypeError, not silent
        (Original, Handles, []),
        (Original, PassThrough, []),
        (Original, Renamed, []),  # `hidden_states=` leaves the required `x` missing: a TypeError
        (Original, Original, []),
        (Decorated, Swallows, ["cache"]),  # seen through the wrapper's (*args, **kwargs)
        (Swallows, Original, []),  # a replacement may name more than the original
        (Strict, Swallows, []),
    ],
)
def test_ignored_keywords_are_the_named_ones_the_replacement_only_catches_in_kwargs(original, replacement, ignored):
    assert ignored_keywords(original, replacement) == ignored


def test_a_default_at_the_renamed_position_would_be_silent_and_is_refused():
    class Optional(nn.Module):
        def forward(self, x=None, **kwargs):
            return x

    assert ignored_keywords(Strict, Optional) == ["hidden_states", "attention_mask"]


class CachedTinyAttention(TinyAttention):
    """TinyAttention whose forward also names a cache, which SdpaTinyAttention does not take."""

    def forward(self, hidden_states: torch.Tensor, cache: Any = None, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        return super().forward(hidden_states, **kwargs)


def test_from_module_refuses_a_kernel_that_would_ignore_a_parameter_naming_it():
    with pytest.raises(
        UnsupportedModuleError,
        match=r"SdpaTinyAttention\.forward would silently ignore `cache`: .*CachedTinyAttention\.forward takes it by name, "
        r"the replacement only in \*\*kwargs\. Give the replacement's forward a parameter for each .*`handled_kwargs`",
    ):
        SdpaTinyAttention.from_module(CachedTinyAttention(TinyConfig()))


@pytest.fixture
def cached_tiny(tiny, monkeypatch):
    """The demo model with `CachedTinyAttention` layers, the class importable from a module of its own."""
    module = types.ModuleType("cached_tiny_attention")
    module.CachedTinyAttention = CachedTinyAttention
    monkeypatch.setitem(sys.modules, module.__name__, module)
    for layer in tiny.layers:
        layer.self_attn.__class__ = CachedTinyAttention
    return tiny


def test_patch_model_refuses_it_with_each_module_path_and_changes_nothing(cached_tiny, input_ids):
    expected = cached_tiny(input_ids).last_hidden_state
    with pytest.raises(
        PatchError, match=r"layers\.0\.self_attn: .*SdpaTinyAttention\.forward would silently ignore `cache`"
    ) as caught:
        patch_model(cached_tiny, {"CachedTinyAttention": SdpaTinyAttention})
    assert [p.path for p in caught.value.problems] == [f"layers.{i}.self_attn" for i in range(len(cached_tiny.layers))]
    assert all(type(layer.self_attn) is CachedTinyAttention for layer in cached_tiny.layers)
    torch.testing.assert_close(cached_tiny(input_ids).last_hidden_state, expected, atol=0, rtol=0)


def test_patch_model_refuses_a_state_free_subclass_that_would_ignore_a_parameter(cached_tiny):
    class Forgetful(CachedTinyAttention):
        def forward(self, hidden_states: torch.Tensor, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
            return TinyAttention.forward(self, hidden_states)

    with pytest.raises(PatchError, match=r"Forgetful\.forward would silently ignore `cache`"):
        patch_model(cached_tiny, {"CachedTinyAttention": Forgetful})


def test_apply_patches_refuses_it_before_swapping_anything():
    module = types.ModuleType("models_with_a_cache")
    module.CachedTinyAttention = CachedTinyAttention
    with pytest.raises(PatchError, match=r"SdpaTinyAttention\.forward would silently ignore `cache`"):
        with apply_patches({"CachedTinyAttention": SdpaTinyAttention}, modules=module):
            pass
    assert module.CachedTinyAttention is CachedTinyAttention


# the shipped attention: the cache under both names


def llama_like_config() -> SimpleNamespace:
    return SimpleNamespace(
        model_type="llama",
        hidden_size=16,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        attention_dropout=0.0,
        attention_bias=False,
        rms_norm_eps=1e-6,
    )


class ListCache:
    """The `update(k, v, layer_idx)` contract of transformers' caches: keys and values appended, all returned."""

    def __init__(self) -> None:
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None

    def update(self, k: torch.Tensor, v: torch.Tensor, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        self.keys = k if self.keys is None else torch.cat((self.keys, k), dim=-2)
        self.values = v if self.values is None else torch.cat((self.values, v), dim=-2)
        return self.keys, self.values


def rotary(seq: int) -> tuple[torch.Tensor, torch.Tensor]:
    angles = torch.arange(seq, dtype=torch.float32)[None, :, None] * torch.linspace(0.1, 1.0, 8)[None, None]
    return angles.cos(), angles.sin()


@pytest.mark.parametrize("name", ["cache", "past_key_values"])
def test_sdpa_attention_takes_the_cache_under_both_names(name):
    class EagerV523(nn.Module):
        def __init__(self, config, layer_idx):
            super().__init__()

        def forward(self, hidden_states, position_embeddings=None, attention_mask=None, past_key_values=None, **kwargs):
            return hidden_states

    class EagerV524(nn.Module):
        def __init__(self, config, layer_idx):
            super().__init__()

        def forward(self, hidden_states, position_embeddings=None, attention_mask=None, cache=None, **kwargs):
            return hidden_states

    assert ignored_keywords(EagerV523, SdpaAttention) == ignored_keywords(EagerV524, SdpaAttention) == []
    torch.manual_seed(0)
    attention = SdpaAttention(llama_like_config(), layer_idx=0).eval()
    hidden = torch.randn(1, 5, 16)
    cos, sin = rotary(5)
    full, _ = attention(hidden, (cos, sin))
    cache = ListCache()
    attention(hidden[:, :4], (cos[:, :4], sin[:, :4]), None, **{name: cache})
    assert cache.keys is not None and cache.keys.shape[-2] == 4
    step, _ = attention(hidden[:, 4:], (cos[:, 4:], sin[:, 4:]), None, **{name: cache})
    torch.testing.assert_close(step, full[:, 4:], atol=1e-5, rtol=0)


def test_sdpa_attention_refuses_two_different_caches():
    attention = SdpaAttention(llama_like_config(), layer_idx=0)
    cos, sin = rotary(3)
    same = ListCache()
    attention(torch.randn(1, 3, 16), (cos, sin), cache=same, past_key_values=same)
    with pytest.raises(CacheNameError, match="two caches, `cache` and `past_key_values`: pass one, as `cache`"):
        attention(torch.randn(1, 3, 16), (cos, sin), cache=ListCache(), past_key_values=ListCache())
