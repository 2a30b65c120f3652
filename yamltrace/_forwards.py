"""What a module class's methods accept, seen through the decorators that wrap them; and which keywords a
replacement's `forward` would silently ignore of those the replaced module's forward names.

Decorators wrap a method two ways: with `functools.wraps` (`__wrapped__`, followed by `inspect.unwrap`),
or as a bare pass-through `(self, *args, **kwargs)` that calls the one function its closure holds (the
`kernels` library's `use_kernelized_func`, which transformers 5.25 puts on attention classes, wraps
`__init__` so). `unwrapped` sees through both; `constructor_signature` and the forward checks below
read signatures through it, so a wrapped class is judged by what its own code accepts.

A replacement called where the original was gets the original's arguments. One the original names
(`cache`, `past_key_values`, ...) that the replacement lacks but takes in `**kwargs` vanishes
there: no error, wrong results (a KV cache never updated). `patch_model`, `apply_patches` and the
shipped kernels' `from_module` refuse such a replacement before anything changes. Only named
parameters count: what the original itself takes in `**kwargs` it may ignore too. Decorators that
wrap a forward (`functools.wraps`) are seen through with `inspect.unwrap`. A replacement forward of
`*args, **kwargs` alone passes everything on (a wrapper's) and is not judged.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from typing import Any

__all__ = ["HANDLED_KWARGS", "constructor_signature", "ignored_keywords", "ignored_keywords_problem", "unwrapped"]

# A replacement class may list here the keywords its forward takes in **kwargs on purpose (it reads
# them there, or they do not apply to what it computes): they are not refused.
HANDLED_KWARGS = "handled_kwargs"


def _passed_to(function: Callable[..., Any]) -> Callable[..., Any] | None:
    """The one function a pass-through wrapper `(self, *args, **kwargs)` calls (from its closure), or None."""
    if not isinstance(function, types.FunctionType) or not function.__closure__:
        return None
    kinds = [p.kind for p in inspect.signature(function).parameters.values()]
    if kinds != [inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD]:
        return None
    held = []
    for cell in function.__closure__:
        try:
            held.append(cell.cell_contents)
        except ValueError:  # an empty cell
            continue
    called = [value for value in held if inspect.isroutine(value)]
    return called[0] if len(called) == 1 else None


def unwrapped(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function` seen through `functools.wraps` wrappers and bare pass-through wrappers (see the module docstring)."""
    seen: set[int] = set()
    while id(function) not in seen:
        seen.add(id(function))
        function = inspect.unwrap(function)
        inner = _passed_to(function)
        if inner is None:
            break
        function = inner
    return function


def constructor_signature(cls: type) -> inspect.Signature:
    """The parameters `cls(...)` accepts: `inspect.signature(cls)`, or, where `cls.__init__` is wrapped,
    those of the `__init__` the wrappers call (without `self`). Raises what `inspect.signature` raises."""
    init = getattr(cls, "__init__", None)
    if init is None or (seen := unwrapped(init)) is init:
        return inspect.signature(cls)
    parameters = list(inspect.signature(seen).parameters.values())[1:]
    return inspect.Signature(parameters)


def _parameters(cls: type) -> list[inspect.Parameter] | None:
    """The parameters of `cls.forward` after `self`, seen through wrapping decorators; None if it has none readable."""
    forward = getattr(cls, "forward", None)
    if forward is None:
        return None
    try:
        return list(inspect.signature(unwrapped(forward)).parameters.values())[1:]
    except (TypeError, ValueError):
        return None


def ignored_keywords(original: type, replacement: type) -> list[str]:
    """The keyword parameters of `original.forward` that `replacement.forward` lacks and would only catch in `**kwargs`."""
    expected, actual = _parameters(original), _parameters(replacement)
    if expected is None or actual is None or not any(p.kind is p.VAR_KEYWORD for p in actual):
        return []  # without **kwargs, an unknown keyword is a TypeError at the call, not a silent loss
    if all(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in actual):
        return []  # `forward(self, *args, **kwargs)`: a pass-through (it forwards everything), not judged here
    by_keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    known = {p.name for p in actual if p.kind in by_keyword} | set(getattr(replacement, HANDLED_KWARGS, ()))
    positional = [p for p in actual if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return [
        p.name
        for position, p in enumerate(expected)
        if p.kind in by_keyword and p.name not in known and not _required(positional, position, p)
    ]


def _required(positional: list[inspect.Parameter], position: int, expected: inspect.Parameter) -> bool:
    """Whether the replacement's parameter at `expected`'s position is required: then `expected` passed by
    position reaches it, and passed by keyword leaves it missing, a TypeError rather than a silent loss."""
    return (
        expected.kind is expected.POSITIONAL_OR_KEYWORD
        and position < len(positional)
        and positional[position].default is inspect.Parameter.empty
    )


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def ignored_keywords_problem(original: type, replacement: type) -> str | None:
    """Why `replacement` cannot stand in for `original` (keywords its forward would ignore), or None."""
    ignored = ignored_keywords(original, replacement)
    if not ignored:
        return None
    listed = ", ".join(f"`{name}`" for name in ignored)
    them = "it" if len(ignored) == 1 else "them"
    return (
        f"{_name(replacement)}.forward would silently ignore {listed}: {_name(original)}.forward takes {them} "
        f"by name, the replacement only in **kwargs. Give the replacement's forward a parameter for each and use "
        f"{them}; or, if its **kwargs handles {them} on purpose, list {them} in the class attribute `{HANDLED_KWARGS}`."
    )
