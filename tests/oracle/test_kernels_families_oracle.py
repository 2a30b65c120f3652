"""Each shipped kernel against the transformers module it replaces, per family (every transformers of the test matrix, CPU).

For every family of `kernel_families.FAMILIES` and every replacement that applies: the replacement
made by `from_module` from each module of a tiny model, called with the exact arguments that module
got in a real forward (masks with sliding windows, rotary tables), returns the original's output
(float32: 1e-5; bfloat16: one bfloat16 step, rtol=atol=1.6e-2), and the same gradients for the
input and every parameter. Then whole models: patched with every replacement at once (`patch_model`)
and built with them (`apply_patches`, the replacement's constructor), their logits equal the
original's, and the patched model's parameter gradients too.
"""

from __future__ import annotations

import pytest
import torch
from kernel_families import (
    FAMILIES,
    GEMMA,
    NO_GATED_MLP,
    cached,
    config,
    ids,
    model_class,
    recorded_calls,
    replacements,
)
from torch import nn

from yamltrace.kernels import GatedMLP, GemmaRMSNorm, RMSNorm, SdpaAttention
from yamltrace.patch import apply_patches, patch_model

pytestmark = pytest.mark.oracle

FLOAT32 = dict(atol=1e-5, rtol=0)
BFLOAT16 = dict(atol=1.6e-2, rtol=1.6e-2)
KINDS = {"attention": "Attention", "norm": "RMSNorm", "mlp": "MLP"}
CASES = [(family, kind) for family in FAMILIES for kind in KINDS if not (kind == "mlp" and family in NO_GATED_MLP)]


def replacement_for(family: str, kind: str) -> type[nn.Module]:
    if kind == "attention":
        return SdpaAttention
    if kind == "norm":
        return GemmaRMSNorm if family in GEMMA else RMSNorm
    return GatedMLP


def first(output):
    return output[0] if isinstance(output, tuple) else output


_CALLS: dict[tuple, list] = {}


def calls_of(family: str, kind: str, dtype: torch.dtype = torch.float32):
    """The recorded calls of the family's `kind` modules in the cached tiny model."""
    if (family, kind, dtype) not in _CALLS:
        model = cached(family, dtype)
        _CALLS[family, kind, dtype] = recorded_calls(model, lambda m: type(m).__name__.endswith(KINDS[kind]))
    assert _CALLS[family, kind, dtype], f"the tiny model has no {kind} module"
    return _CALLS[family, kind, dtype]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("family, kind", CASES)
def test_replacement_equals_the_original_module(family, kind, dtype):
    for path, original, args, kwargs in calls_of(family, kind, dtype):
        replacement = replacement_for(family, kind).from_module(original)
        assert set(dict(replacement.named_parameters())) == set(dict(original.named_parameters()))
        assert all(a is b for a, b in zip(replacement.parameters(), original.parameters()))
        with torch.no_grad():
            expected, got = first(original(*args, **kwargs)), first(replacement(*args, **kwargs))
        assert got.dtype == expected.dtype, path
        torch.testing.assert_close(
            got, expected, **(FLOAT32 if dtype == torch.float32 else BFLOAT16), msg=lambda m, path=path: f"{path}: {m}"
        )


def _gradients(module: nn.Module, args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """d(sum(output * fixed weights)) / d(input, every parameter)."""
    hidden = (args[0] if args else kwargs["hidden_states"]).detach().clone().requires_grad_(True)
    args, kwargs = ((hidden, *args[1:]), kwargs) if args else ((), {**kwargs, "hidden_states": hidden})
    module.zero_grad(set_to_none=True)
    output = first(module(*args, **kwargs))
    weights = torch.randn(output.shape, generator=torch.Generator().manual_seed(2))
    (output * weights).sum().backward()
    return [hidden.grad, *(p.grad if p.grad is not None else torch.zeros_like(p) for p in module.parameters())]


@pytest.mark.parametrize("family, kind", CASES)
def test_replacement_has_the_original_gradients(family, kind):
    for path, original, args, kwargs in calls_of(family, kind):
        expected = _gradients(original, args, kwargs)
        got = _gradients(replacement_for(family, kind).from_module(original), args, kwargs)
        for number, (a, b) in enumerate(zip(got, expected)):
            torch.testing.assert_close(a, b, **FLOAT32, msg=lambda m, path=path, number=number: f"{path} gradient {number}: {m}")


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_model_patched_with_every_replacement_has_the_same_logits_and_gradients(family):
    model = cached(family)
    inputs = ids()

    def logits_and_gradients():
        model.zero_grad(set_to_none=True)
        logits = model(inputs, use_cache=False).logits
        logits.square().mean().backward()
        return logits.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]

    expected_logits, expected_grads = logits_and_gradients()
    with patch_model(model, replacements(family)) as handle:
        assert {r.replacement for r in handle.replaced} == set(replacements(family).values())
        logits, grads = logits_and_gradients()
    torch.testing.assert_close(logits, expected_logits, **FLOAT32)
    assert len(grads) == len(expected_grads)
    for a, b in zip(grads, expected_grads):
        torch.testing.assert_close(a, b, **FLOAT32)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_bfloat16_replacements_are_as_close_to_float32_as_the_originals(family):
    """In bfloat16, the patched model's logits are about as far from the float32 logits as the original's are."""
    reference, model = cached(family), cached(family, torch.bfloat16)
    inputs = ids()
    with torch.no_grad():
        truth = reference(inputs).logits
        original_error = (model(inputs).logits.float() - truth).abs().max()
        with patch_model(model, replacements(family)):
            replacement_error = (model(inputs).logits.float() - truth).abs().max()
    assert replacement_error <= 1.5 * original_error, (replacement_error, original_error)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_model_built_with_the_replacements_has_the_same_logits(family):
    reference = cached(family)
    cls = model_class(family)
    with apply_patches(replacements(family), modules=[cls]) as replaced:
        model = cls(config(family)).eval()
    assert {r.replacement for r in replaced} == set(replacements(family).values())
    built = {type(m) for m in model.modules()}
    assert set(replacements(family).values()) <= built
    model.load_state_dict(reference.state_dict())
    inputs = ids()
    with torch.no_grad():
        torch.testing.assert_close(model(inputs).logits, reference(inputs).logits, **FLOAT32)


@pytest.mark.parametrize("family", ["mistral", "qwen2", "gemma3", "phi3"])
def test_cached_generation_steps_with_sliding_windows_equal_the_original(family):
    from transformers import DynamicCache

    model = cached(family)
    steps = [ids(1, 7), ids(1, 3)[:, :2], ids(1, 1)]
    outputs = []
    for patched in (False, True):
        cache = DynamicCache(config=model.config)
        with torch.no_grad(), patch_model(model, replacements(family) if patched else {}):
            outputs.append([model(step, past_key_values=cache, use_cache=True).logits for step in steps])
    for got, expected in zip(outputs[1], outputs[0]):
        torch.testing.assert_close(got, expected, **FLOAT32)


def _window_mask(q_len: int, k_len: int) -> torch.Tensor:
    """transformers' additive causal mask with a sliding window of 4, for the last `q_len` of `k_len` positions."""
    rows, cols = torch.arange(k_len - q_len, k_len)[:, None], torch.arange(k_len)[None]
    return torch.zeros(1, 1, q_len, k_len).masked_fill((cols > rows) | (cols <= rows - 4), torch.finfo(torch.float32).min)


@pytest.mark.parametrize("q_len", [9, 3, 1])
def test_without_a_mask_the_window_and_causality_are_built_in(q_len):
    """Called with no mask (after a cache prefix or not), SdpaAttention applies the causal window the model would build."""
    from transformers import DynamicCache

    model = cached("mistral")
    original = model.model.layers[0].self_attn
    replacement = SdpaAttention.from_module(original)
    assert replacement.sliding_window == 4
    hidden = torch.randn(1, 9, 32, generator=torch.Generator().manual_seed(3))
    cos, sin = model.model.rotary_emb(hidden, torch.arange(9)[None])
    start = 9 - q_len
    outputs = []
    for module, masked in ((original, True), (replacement, False)):
        cache = DynamicCache()
        with torch.no_grad():
            if start:
                module(hidden[:, :start], (cos[:, :start], sin[:, :start]), _window_mask(start, start) if masked else None, cache)
            step = module(hidden[:, start:], (cos[:, start:], sin[:, start:]), _window_mask(q_len, 9) if masked else None, cache)
        outputs.append(step[0])
    torch.testing.assert_close(outputs[1], outputs[0], **FLOAT32)
