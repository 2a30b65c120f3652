"""How many attention heads a module's tensors split into: asked of the module and the modules above it.

A capture such as `attention_heads` (the input of an attention block's output projection) is every
head's result flattened to `[..., heads * head_dim]`. The head count is the nearest module's, walking
from the captured module up to the root: an attention module's `num_heads` or `head_dim` (transformers'
attention classes carry one of them), else a model's `config.num_attention_heads`. The nearest one
wins, so a composite's vision tower and text model, or a decoder with its own head count, each split
by their own. The walk (`head_sources`) needs the module tree, the count (`count_heads`) the width of
the tensor: an intervention with `heads` walks when it is planned and counts at each call;
`Captures.split_heads` does both at once (`head_count`).
"""

from __future__ import annotations

from torch import nn

__all__ = ["HeadSources", "count_heads", "head_count", "head_sources"]

# Per module from the one at a path up to the root, nearest first: its `num_heads`, its `head_dim`
# and its config's `num_attention_heads`, each None where it has none (a positive int otherwise).
HeadSources = tuple[tuple[int | None, int | None, int | None], ...]


def _positive(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def head_sources(model: nn.Module, path: str) -> HeadSources:
    """What the module at `path` of `model` (a `named_modules()` name, `""` for the root) and each
    module above it say about heads, nearest first; modules that say nothing are left out."""
    parts = path.split(":")[0].split(".") if path else []
    found = []
    for depth in range(len(parts), -1, -1):
        try:
            module = model.get_submodule(".".join(parts[:depth]))
        except AttributeError:
            continue
        said = (
            _positive(getattr(module, "num_heads", None)),
            _positive(getattr(module, "head_dim", None)),
            _positive(getattr(getattr(module, "config", None), "num_attention_heads", None)),
        )
        if said != (None, None, None):
            found.append(said)
    return tuple(found)


def count_heads(sources: HeadSources, width: int) -> int | None:
    """The number of heads a last dimension of `width` splits into by the nearest source that says
    (a `head_dim` says only for a width it divides); None when none does."""
    for heads, head_dim, config_heads in sources:
        if heads is not None:
            return heads
        if head_dim is not None and width % head_dim == 0:
            return width // head_dim
        if config_heads is not None:
            return config_heads
    return None


def head_count(model: nn.Module, path: str, width: int) -> int | None:
    """The number of heads a last dimension of `width` splits into for the module at `path` of `model`
    (a `named_modules()` name, `""` for the root); None when no module on the way up says."""
    return count_heads(head_sources(model, path), width)
