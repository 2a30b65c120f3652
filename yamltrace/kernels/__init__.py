"""Replacement kernels to swap in with one line of a spec, each verified against the module it replaces.

| replacement                  | replaces                                                                    |
|------------------------------|-----------------------------------------------------------------------------|
| `RMSNorm`                    | Llama-style RMSNorm (`weight`, `variance_epsilon`) via `F.rms_norm`         |
| `GemmaRMSNorm`               | Gemma-style RMSNorm (`1 + weight`, `eps`) via `F.rms_norm`                  |
| `GatedMLP`                   | SwiGLU / GeGLU MLPs (separate or fused gate/up) as one expression           |
| `SdpaAttention`              | eager decoder attention via `scaled_dot_product_attention`, GQA, windows    |
| `SdpaLlamaAttention`         | the same as `SdpaAttention` (the name earlier specs use)                    |
| `SdpaTinyAttention`          | `yamltrace.examples.tiny.TinyAttention`                                     |
| `TimmEagerAttention`         | timm's ViT `Attention`, eager: probabilities through `attn_drop` (timm)     |
| `DiffusersEagerAttention`    | diffusers' `Attention`, eager: probabilities through `attn_probs` (diffusers)|

Each has the original's constructor (for `apply_patches`/`from_pretrained`) and a
`from_module(original)` that checks the module's structure, raises `UnsupportedModuleError` naming
what does not fit, and otherwise shares the original's parameters (for `patch_model`). docs/kernels.md
lists the families, the tolerances and the measurements; docs/vision.md the timm and diffusers ones.
Importing this package imports neither transformers nor timm nor diffusers: `TimmEagerAttention` and
`DiffusersEagerAttention` import their library when first named.
"""

from typing import Any


from ._adopt import UnsupportedModuleError
from ._attention import SdpaAttention, SdpaLlamaAttention
from ._hub import forward_from
from ._probs import AttentionProbabilities
from ._mlp import GatedMLP
from ._norm import GemmaRMSNorm, RMSNorm
from ._rotary import apply_rotary
from ._tiny import SdpaTinyAttention

__all__ = [
    "AttentionProbabilities",
    "GatedMLP",
    "GemmaRMSNorm",
    "RMSNorm",
    "SdpaAttention",
    "SdpaLlamaAttention",
    "SdpaTinyAttention",
    "UnsupportedModuleError",
    "apply_rotary",
    "forward_from",
]

# Replacements for other libraries' modules, imported (with their library) when first named; not in
# `__all__`, so that `from yamltrace.kernels import *` imports neither library.
_LIBRARY_KERNELS = {"TimmEagerAttention": "._timm", "DiffusersEagerAttention": "._diffusers"}


def __getattr__(name: str) -> Any:
    module = _LIBRARY_KERNELS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value
