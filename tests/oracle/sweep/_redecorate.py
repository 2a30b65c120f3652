"""Variant (c): the same forward code under yamltrace's decorators instead of transformers'.

Every module of a model whose class `forward` carries transformers' `capture_outputs` gets a
subclass whose `forward` is the same code with each decorator replaced in place: transformers'
`capture_outputs` by yamltrace's (same `tie_last_hidden_states`), `merge_with_config_defaults` by
yamltrace's, `can_return_tuple` and backbones' `filter_output_hidden_states` (which asks its forward
for hidden states and drops them from the output unless the caller asked) kept. Any other decorator
in the chain is an error (the harness cannot rebuild what it does not know), so nothing is silently
dropped.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from typing import Any

from torch import nn

__all__ = ["redecorate", "UnknownDecorator"]


class UnknownDecorator(Exception):
    """A forward carries a decorator the harness does not know how to rebuild."""


@functools.cache
def _codes() -> dict[Any, str]:
    from transformers.backbone_utils import filter_output_hidden_states
    from transformers.utils.generic import can_return_tuple, merge_with_config_defaults
    from transformers.utils.output_capturing import capture_outputs

    def probe(self: Any) -> None:
        return None

    return {
        capture_outputs(probe).__code__: "capture",
        merge_with_config_defaults(probe).__code__: "merge",
        can_return_tuple(probe).__code__: "tuple",
        filter_output_hidden_states(probe).__code__: "filter",
    }


def _closure_value(func: Callable[..., Any], name: str) -> Any:
    code = func.__code__
    return func.__closure__[code.co_freevars.index(name)].cell_contents


def _chain(cls: type) -> tuple[list[tuple[str, Callable[..., Any]]], Callable[..., Any]]:
    """(the wrappers outermost first, each with its kind), and the forward code they wrap."""
    wrappers = []
    forward = cls.forward
    while hasattr(forward, "__wrapped__"):
        kind = _codes().get(getattr(forward, "__code__", None))
        if kind is None:
            raise UnknownDecorator(f"{cls.__name__}.forward: unknown decorator {forward.__code__.co_qualname}")
        wrappers.append((kind, forward))
        forward = forward.__wrapped__
    return wrappers, forward


@functools.cache
def _redecorated_class(cls: type) -> type:
    from transformers.backbone_utils import filter_output_hidden_states
    from transformers.utils.generic import can_return_tuple

    from yamltrace.capture import capture_outputs
    from yamltrace.modeling import merge_with_config_defaults

    wrappers, forward = _chain(cls)
    for kind, wrapper in reversed(wrappers):
        if kind == "capture":
            tie = _closure_value(wrapper, "tie_last_hidden_states")
            forward = capture_outputs(forward, tie_last_hidden_states=tie)
        elif kind == "merge":
            forward = merge_with_config_defaults(forward)
        elif kind == "filter":
            forward = filter_output_hidden_states(forward)
        else:
            forward = can_return_tuple(forward)
    return type(f"Yamltrace{cls.__name__}", (cls,), {"forward": forward, "__module__": cls.__module__})


def _has_capture(cls: type) -> bool:
    forward = cls.forward
    while hasattr(forward, "__wrapped__"):
        if _codes().get(getattr(forward, "__code__", None)) == "capture":
            return True
        forward = forward.__wrapped__
    return False


def redecorate(model: nn.Module) -> tuple[nn.Module, int]:
    """A deep copy of `model` whose capture-decorated modules run under yamltrace's decorators,
    and how many modules were switched (0: the model has no decorated forward anywhere)."""
    twin = copy.deepcopy(model)
    switched = 0
    for module in twin.modules():
        if _has_capture(type(module)):
            module.__class__ = _redecorated_class(type(module))
            switched += 1
    return twin, switched
