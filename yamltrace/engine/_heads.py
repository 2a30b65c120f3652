"""How many attention heads a module's tensors split into: asked of the module and the modules above it.

A capture such as `attention_heads` (the input of an attention block's output projection) is every
head's result flattened to `[..., heads * head_dim]`. The head count is the nearest module's, walking
from the captured module up to the root: an attention module's `num_heads` or `head_dim` (transformers'
attention classes carry one of them), else a model's `config.num_attention_heads`. The nearest one
wins, so a composite's vision tower and text model, or a decoder with its own head count, each split
by their own.
"""

from __future__ import annotations

from torch import nn

__all__ = ["head_count"]


def _positive(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def head_count(model: nn.Module, path: str, width: int) -> int | None:
    """The number of heads a last dimension of `width` splits into for the module at `path` of `model`
    (a `named_modules()` name, `""` for the root); None when no module on the way up says."""
    parts = path.split(":")[0].split(".") if path else []
    for depth in range(len(parts), -1, -1):
        try:
            module = model.get_submodule(".".join(parts[:depth]))
        except AttributeError:
            continue
        heads = _positive(getattr(module, "num_heads", None))
        if heads is not None:
            return heads
        head_dim = _positive(getattr(module, "head_dim", None))
        if head_dim is not None and width % head_dim == 0:
            return width // head_dim
        heads = _positive(getattr(getattr(module, "config", None), "num_attention_heads", None))
        if heads is not None:
            return heads
    return None
