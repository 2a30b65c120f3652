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

Called every way the original can be (`call_problem`): the original's named parameters bound to the
replacement's forward positionally, then by keyword (`inspect.Signature.bind`, nothing is called), so
a replacement that requires an argument the original's callers never pass (`forward(self, x,
residual)`), takes fewer positional arguments, lacks a keyword (without `**kwargs`) or `**kwargs`
itself where the original has it, is refused before anything changes, not at the first forward 16
frames deep. A deliberate difference is listed in the class attribute `forward_differences`.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from typing import Any

__all__ = [
    "FORWARD_DIFFERENCES",
    "HANDLED_KWARGS",
    "call_problem",
    "constructor_signature",
    "forward_problem",
    "ignored_keywords",
    "ignored_keywords_problem",
    "unwrapped",
]

# A replacement class may list here the keywords its forward takes in **kwargs on purpose (it reads
# them there, or they do not apply to what it computes): they are not refused.
HANDLED_KWARGS = "handled_kwargs"
# A replacement class may list here the parameters in which its forward deliberately differs from the
# original's: an original's parameter listed is never passed by that name (its callers pass it by
# position, as decoder layers pass an MLP's input; a trailing one the replacement has no position for
# is not passed at all), a replacement's required parameter listed counts as given, and `*args` /
# `**kwargs` listed say that callers pass none, although the original takes them.
FORWARD_DIFFERENCES = "forward_differences"


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


def call_problem(original: type, replacement: type) -> str | None:
    """Why `replacement.forward` cannot be called every way `original.forward` can, or None."""
    if getattr(getattr(original, "forward", None), "__name__", None) == "_forward_unimplemented":
        return None  # no forward of its own (nn.Module's raises): nothing calls it
    expected, actual = _parameters(original), _parameters(replacement)
    if expected is None or actual is None or all(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in actual):
        return None
    differences = set(getattr(replacement, FORWARD_DIFFERENCES, ()))
    named = [p for p in expected if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    positional = [p.name for p in named if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    only_positional = [p.name for p in named if p.kind is p.POSITIONAL_ONLY]
    keyword = [p.name for p in named if p.kind is p.KEYWORD_ONLY]
    by_keyword = [p.name for p in named if p.kind is p.POSITIONAL_OR_KEYWORD]
    signature = inspect.Signature([p.replace(annotation=p.empty) for p in actual])
    slots = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in actual)
    variadic = any(p.kind is p.VAR_POSITIONAL for p in actual)
    # By keyword, the first parameter (the module's input: `module(x)`, torch's convention, as decoder
    # layers call their norms and MLPs) and listed differences right after it are passed by position.
    first = 1 if by_keyword and positional[:1] == by_keyword[:1] else 0
    lead = next((i for i, name in enumerate(by_keyword) if i >= first and name not in differences), len(by_keyword))
    for args, kwargs in ((positional, keyword), (only_positional + by_keyword[:lead], by_keyword[lead:] + keyword)):
        args = list(args)
        while args and len(args) > slots and not variadic and args[-1] in differences:
            args.pop()
        if any(p.kind is p.VAR_POSITIONAL for p in expected):  # callers may fill more positions
            more = actual[len(args) :]
            args += [p.name for p in more if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name not in kwargs]
        given = {name: name for name in kwargs if name not in differences}
        for position, p in enumerate(actual):
            taken = position < len(args) and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            if (
                p.name in differences
                and p.default is p.empty
                and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
                and not taken
            ):
                given.setdefault(p.name, p.name)
        try:
            signature.bind(*args, **given)
        except TypeError as error:
            shown = ", ".join([*args, *(f"{name}=..." for name in given)])
            return _call_message(original, replacement, f"called as the original can be, forward({shown}): {error}")
    for kind, star in ((inspect.Parameter.VAR_POSITIONAL, "*args"), (inspect.Parameter.VAR_KEYWORD, "**kwargs")):
        if any(p.kind is kind for p in expected) and not any(p.kind is kind for p in actual) and star not in differences:
            return _call_message(
                original, replacement, f"the original takes {star}, which its callers may fill; the replacement has none"
            )
    return None


def _call_message(original: type, replacement: type, why: str) -> str:
    return (
        f"{_name(replacement)}.forward{_signature(replacement)} cannot be called as "
        f"{_name(original)}.forward{_signature(original)} is: {why}. Give the replacement's forward the original's "
        f"parameters (names, order, defaults); or, for a deliberate difference, list the parameters in the class "
        f"attribute `{FORWARD_DIFFERENCES}`."
    )


def _signature(cls: type) -> str:
    """`(hidden_states, cache=None, **kwargs)`: the forward's parameters after `self`, without annotations."""
    parameters = _parameters(cls) or []
    return str(inspect.Signature([p.replace(annotation=p.empty) for p in parameters]))


def forward_problem(original: type, replacement: type) -> str | None:
    """Why `replacement`'s forward cannot stand in for `original`'s (an argument it would silently
    ignore, or one it cannot take or needs and is not given), or None."""
    return ignored_keywords_problem(original, replacement) or call_problem(original, replacement)


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
