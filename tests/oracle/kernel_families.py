"""Tiny transformers models of each family the shipped kernels serve, and the inputs their modules really get.

`build(family)` makes a 2-layer causal LM (eager attention, float32, seeded) whose config exercises
what the family has: biases, sliding windows (window 4 < sequence 10), q/k norms, partial rotary,
MoE blocks. `recorded_calls(model, classes)` runs one forward and returns the exact arguments each
matching module was called with, so a replacement is compared with the original on real masks and
rotary tables.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import transformers
from packaging.version import Version
from torch import nn

from yamltrace.kernels import GatedMLP, GemmaRMSNorm, RMSNorm, SdpaAttention

SEQ = 10
VOCAB = 64
_SIZES: dict[str, Any] = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    max_position_embeddings=64,
    pad_token_id=0,
)
_WINDOWED = dict(sliding_window=4, layer_types=["sliding_attention", "full_attention"])

# family -> (transformers config class name, causal LM class name, config overrides)
FAMILIES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(attention_bias=True, mlp_bias=True)),
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(sliding_window=4)),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", dict(sliding_window=4, num_local_experts=4, num_experts_per_tok=2)),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(use_sliding_window=True, **_WINDOWED)),
    "qwen2_moe": (
        "Qwen2MoeConfig",
        "Qwen2MoeForCausalLM",
        dict(
            use_sliding_window=True,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=16,
            shared_expert_intermediate_size=24,
            **_WINDOWED,
        ),
    ),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(attention_bias=True, use_sliding_window=True, **_WINDOWED)),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", dict(hidden_act="gelu_pytorch_tanh")),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", dict(attn_logit_softcapping=None, query_pre_attn_scalar=16, **_WINDOWED)),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(query_pre_attn_scalar=16, **_WINDOWED)),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", dict(sliding_window=4, partial_rotary_factor=0.5)),
}
GEMMA = {"gemma", "gemma2", "gemma3"}
NO_GATED_MLP = {"mixtral"}  # its experts are one fused 3-D module, not an MLP per expert


def config(family: str, **overrides: Any) -> Any:
    import transformers

    config_name, _, extra = FAMILIES[family]
    made = getattr(transformers, config_name)(**{**_SIZES, **extra, **overrides})
    made._attn_implementation = "eager"
    return made


def model_class(family: str) -> type[nn.Module]:
    import transformers

    return getattr(transformers, FAMILIES[family][1])


def build(family: str, dtype: torch.dtype = torch.float32, **overrides: Any) -> nn.Module:
    """A fresh seeded tiny causal LM of the family; `cached` shares one per (family, dtype) between tests."""
    torch.manual_seed(0)
    model = model_class(family)(config(family, **overrides)).eval()
    with torch.no_grad():  # Gemma norms start at zero weight (1 + 0): perturb every weight so each one matters
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.1)
    return model.to(dtype)


_CACHE: dict[tuple[str, torch.dtype], nn.Module] = {}


def cached(family: str, dtype: torch.dtype = torch.float32) -> nn.Module:
    """`build(family, dtype)`, built once per process; callers must leave it as they found it (weights, patches)."""
    if (family, dtype) not in _CACHE:
        _CACHE[family, dtype] = build(family, dtype)
    return _CACHE[family, dtype]


def with_cache(cache: Any) -> dict[str, Any]:
    """The forward keywords that pass `cache` under the installed transformers' name (`cache` from 5.24.0)."""
    named_cache = Version(transformers.__version__) >= Version("5.24.0")
    return {"cache" if named_cache else "past_key_values": cache, "use_cache": True}


def ids(batch: int = 2, seq: int = SEQ) -> torch.Tensor:
    return torch.randint(1, VOCAB, (batch, seq), generator=torch.Generator().manual_seed(1))


def replacements(family: str) -> dict[str, type[nn.Module]]:
    """The patch mapping of every shipped replacement that applies to the family (regex keys)."""
    mapping: dict[str, type[nn.Module]] = {"Attention$": SdpaAttention, "RMSNorm$": GemmaRMSNorm if family in GEMMA else RMSNorm}
    if family not in NO_GATED_MLP:
        mapping["MLP$"] = GatedMLP
    return mapping


def recorded_calls(
    model: nn.Module, selects: Callable[[nn.Module], bool], inputs: torch.Tensor | None = None
) -> list[tuple[str, nn.Module, tuple, dict]]:
    """(path, module, args, kwargs) of each selected module's call in one forward of `inputs` (default `ids()`)."""
    calls: list[tuple[str, nn.Module, tuple, dict]] = []
    handles = []
    for path, module in model.named_modules():
        if selects(module):

            def hook(module: nn.Module, args: tuple, kwargs: dict, path: str = path) -> None:
                calls.append((path, module, args, dict(kwargs)))

            handles.append(module.register_forward_pre_hook(hook, with_kwargs=True))
    try:
        with torch.no_grad():
            model(ids() if inputs is None else inputs, use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    return calls
