"""Variant (c): the same forward code under yamltrace's decorators instead of transformers'.

Every module of a model whose class `forward` carries transformers' `capture_outputs` gets a
subclass whose `forward` is the same code with each decorator replaced in place: transformers'
`capture_outputs` by yamltrace's (same `tie_last_hidden_states`), `merge_with_config_defaults` by
yamltrace's, `can_return_tuple` and backbones' `filter_output_hidden_states` (which asks its forward
for hidden states and drops them from the output unless the caller asked) kept. Any other wrapper in
the chain (`functools.wraps`, so `__wrapped__`: transformers 5.24's `deprecate_kwarg`, or whatever
comes next) is kept too: the same wrapper code around the rebuilt inner forward, its closure cell that
held the old inner forward pointing at the new one. A wrapper with no such cell cannot be rebuilt and
is unwrapped (dropped), so the comparison shows whatever it changed.
"""

from __future__ import annotations

import copy
import functools
import types
from collections.abc import Callable
from typing import Any

from torch import nn

__all__ = ["redecorate"]


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
    """(the wrappers outermost first, each with its kind: "other" for one the harness does not
    know), and the forward code they wrap."""
    wrappers = []
    forward = cls.forward
    while hasattr(forward, "__wrapped__"):
        wrappers.append((_codes().get(getattr(forward, "__code__", None), "other"), forward))
        forward = forward.__wrapped__
    return wrappers, forward


def _rewrap(wrapper: Callable[..., Any], inner: Callable[..., Any]) -> Callable[..., Any]:
    """`wrapper`'s code around `inner`: a copy whose closure cell holding the function it wrapped
    holds `inner`; `inner` itself (the wrapper dropped) when no cell holds it."""
    closure = getattr(wrapper, "__closure__", None) or ()
    wrapped = wrapper.__wrapped__  # type: ignore[attr-defined]
    if not isinstance(wrapper, types.FunctionType) or not any(c.cell_contents is wrapped for c in closure):
        return inner
    cells = tuple(types.CellType(inner) if c.cell_contents is wrapped else c for c in closure)
    rebuilt = types.FunctionType(wrapper.__code__, wrapper.__globals__, wrapper.__name__, wrapper.__defaults__, cells)
    rebuilt.__kwdefaults__ = wrapper.__kwdefaults__
    return functools.update_wrapper(rebuilt, inner)


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
        elif kind == "tuple":
            forward = can_return_tuple(forward)
        else:
            forward = _rewrap(wrapper, forward)
    return type(f"Yamltrace{cls.__name__}", (cls,), {"forward": forward, "__module__": cls.__module__})


def _has_capture(cls: type) -> bool:
    return any(kind == "capture" for kind, _ in _chain(cls)[0])


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
