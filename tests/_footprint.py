"""What a capture leaves on a model: torch hooks and forward interceptors, counted per module."""

from __future__ import annotations

from torch import nn


def hook_count(model: nn.Module) -> int:
    """Forward (pre-)hooks and instance-level `forward` attributes on every module of `model`.

    A module of a model nobody intercepts has neither, so the count is 0 exactly when a capture left
    nothing behind.
    """
    return sum(
        len(m._forward_hooks)
        + len(m._forward_pre_hooks)
        + len(m._forward_hooks_always_called)
        + int("forward" in m.__dict__)
        for m in model.modules()
    )
