"""What a spec asks of the model it is loaded into: `options: {attn_implementation: eager}`.

A spec that captures attention weights needs an attention implementation that computes them; it says
so in its options, and a load builds the model with it. A caller's own `attn_implementation=` that
contradicts the spec is an error, never a silent choice: the spec's captures would be empty.
"""

from __future__ import annotations

from typing import Any

from ..errors import SpecError, SpecIssue
from ..spec import Spec

__all__ = ["ATTN_OPTION", "attn_implementation", "configure_attn_implementation", "with_attn_implementation"]

ATTN_OPTION = "attn_implementation"


def attn_implementation(spec: Spec | None, given: Any = None) -> Any:
    """The attention implementation to build with: the spec's option, else `given` (the caller's).

    Raises `SpecError` at `$.options.attn_implementation` when both are set and differ.
    """
    wanted = None if spec is None else spec.options.get(ATTN_OPTION)
    if wanted is None or given is None or given == wanted:
        return given if wanted is None else wanted
    message = (
        f"the spec needs attn_implementation {wanted!r} for its captures, but the load was given "
        f"attn_implementation={given!r}. Drop the argument, or change the spec's option (for a checkpoint's "
        f"spec: overrides={{'options': {{'{ATTN_OPTION}': {given!r}}}}})."
    )
    raise SpecError([SpecIssue(message, f"$.options.{ATTN_OPTION}", spec.source if spec is not None else None)])


def with_attn_implementation(kwargs: dict[str, Any], spec: Spec | None) -> dict[str, Any]:
    """transformers `from_pretrained` keyword arguments with the attention implementation the spec needs."""
    chosen = attn_implementation(spec, kwargs.get(ATTN_OPTION))
    return kwargs if chosen is None else {**kwargs, ATTN_OPTION: chosen}


def configure_attn_implementation(config: Any, spec: Spec | None) -> Any:
    """Set the attention implementation the spec needs on a transformers config (one that has
    `_attn_implementation`) before a model is built from it; returns the implementation set, or None."""
    wanted = attn_implementation(spec)
    if wanted is None or not hasattr(config, "_attn_implementation"):
        return None
    config._attn_implementation = wanted
    return wanted
