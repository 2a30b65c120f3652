"""Post-hoc swaps: `patch_model` replaces the submodules of a built model, all or nothing, undoably."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

import torch
from torch import nn

from .._forwards import forward_problem
from ..engine import invalidate
from ..errors import PatchError, PatchProblem, did_you_mean
from ..spec import load_spec
from ..spec._patch_rule import PatchRule, device_type, model_device, record_swaps
from ._handle import PatchHandle, Replacement
from ._recorders import patch_output_recorders
from ._registry import MappingLike, resolve_rule
from ._state import state_problem

__all__ = ["patch_model"]


def _adds_no_state(replacement: type, original: type) -> bool:
    """Whether `replacement` subclasses `original` without an `__init__` or `__slots__` of its own."""
    if not issubclass(replacement, original):
        return False
    between = replacement.__mro__[: replacement.__mro__.index(original)]
    return not any("__init__" in vars(cls) or "__slots__" in vars(cls) for cls in between)


_Holder = tuple[nn.Module, str, str]  # a module holding a submodule: (parent, attribute, dotted path)
_Step = tuple[nn.Module, list[_Holder], type, str]  # (module, its holders, replacement, "class" | "from_module")


def _references(model: nn.Module) -> dict[int, tuple[nn.Module, list[_Holder]]]:
    """For each submodule (not the root): the module and every (parent, attribute, path) holding it."""
    refs: dict[int, tuple[nn.Module, list[_Holder]]] = {}
    for parent_path, parent in model.named_modules():
        for name, child in parent._modules.items():
            if child is not None:
                path = f"{parent_path}.{name}" if parent_path else name
                refs.setdefault(id(child), (child, []))[1].append((parent, name, path))
    return refs


def _plan_model(model: nn.Module, rule: PatchRule, missing_ok: bool) -> list[_Step]:
    """What `patch_model` will do, deepest modules first; PatchError listing every problem."""
    plan: list[_Step] = []
    problems: list[PatchProblem] = []
    used: set[str] = set()
    for child, holders in _references(model).values():
        key = rule.key_for(type(child).__name__)
        if key is None:
            continue
        used.add(key)
        replacement, original = rule.mapping[key], type(child)
        if isinstance(child, replacement):
            continue
        if callable(getattr(replacement, "from_module", None)):
            how = "from_module"
        elif _adds_no_state(replacement, original):
            how = "class"
        else:
            problems.append(
                PatchProblem(
                    f"{holders[0][2]} ({original.__module__}.{original.__qualname__}): cannot become "
                    f"{replacement.__module__}.{replacement.__qualname__}: it has no from_module(original) classmethod "
                    f"and is not a subclass of {original.__qualname__} that adds no state. Add a from_module classmethod "
                    "that builds the replacement from the original module.",
                    holders[0][2],
                )
            )
            continue
        if (ignored := forward_problem(original, replacement)) is not None:
            problems.append(PatchProblem(f"{holders[0][2]}: {ignored}", holders[0][2]))
            continue
        plan.append((child, holders, replacement, how))
    if not missing_ok:
        root = type(model).__name__
        names = sorted({type(m).__name__ for m in model.modules()} - {root})
        for key in rule.mapping:
            if key not in used:
                why = " (the root module itself is never replaced)" if PatchRule({key: nn.Module}).key_for(root) else ""
                problems.append(
                    PatchProblem(
                        f"Patch pattern {key!r} matches no submodule of {root}{why}{did_you_mean(key, names)}"
                        "; fix the pattern or pass missing_ok=True.",
                        key,
                    )
                )
    if problems:
        raise PatchError(problems)
    plan.sort(key=lambda item: -min(path.count(".") for _, _, path in item[1]))
    return plan


def _swap(child: nn.Module, holders: list[_Holder], replacement: type, how: str, undo: list[Callable[[], None]]) -> None:
    """Make every holder of `child` hold its replacement; append the undo steps."""
    original = type(child)
    if how == "class":
        child.__class__ = replacement
        invalidate()
        undo.append(lambda: setattr(child, "__class__", original))
        return
    try:
        new = getattr(replacement, "from_module")(child)  # _plan_model chose "from_module": it is callable
    except Exception as error:
        raise PatchError(
            [PatchProblem(f"{holders[0][2]}: {replacement.__qualname__}.from_module failed: {error}", holders[0][2])]
        ) from error
    if not isinstance(new, nn.Module):
        raise PatchError(
            [
                PatchProblem(
                    f"{holders[0][2]}: {replacement.__qualname__}.from_module returned {type(new).__name__}, not a module.",
                    holders[0][2],
                )
            ]
        )
    problem = state_problem(child, new)
    if problem is not None:
        raise PatchError([PatchProblem(f"{holders[0][2]}: {problem}", holders[0][2])])
    new.training = child.training
    for parent, name, _ in holders:
        setattr(parent, name, new)
        undo.append(functools.partial(setattr, parent, name, child))
    invalidate()


def patch_model(
    model: nn.Module,
    mapping_or_spec: MappingLike,
    *,
    missing_ok: bool = False,
    device: str | torch.device | None = None,
    trust_imports: bool = False,
) -> PatchHandle:
    """Replace the submodules of a built model whose class the mapping selects; returns the undo handle.

    `mapping_or_spec` is a `pattern -> class` mapping, a `Spec`, a spec file path or YAML text (read
    with `load_spec(..., for_model=model, trust_imports=trust_imports)`), or None for the process-wide
    registry. `trust_imports` lets such a spec import modules outside the model's package, torch and
    yamltrace (as for `load_spec`).

    Each match is rebuilt by the replacement's `from_module(original)` classmethod (which should share
    the original's parameters and buffers), or, for a subclass that adds no state, by reassigning its
    class (parameters, buffers, hooks untouched). Training mode is kept. Deeper modules are replaced
    first; the root module itself is never replaced. Capture maps are retargeted too
    (`patch_output_recorders`), so `trace` and `capture_outputs` record the replacements.

    Fails with PatchError, changing nothing, when a match cannot be converted or a pattern matches no
    module (unless `missing_ok`). `device` selects a Spec's entries (default: the model's device).
    `handle.replaced` lists what was replaced; `handle.remove()` restores the originals.
    """
    if isinstance(mapping_or_spec, (str, os.PathLike)):  # a spec file or YAML text, as `trace` accepts
        mapping_or_spec = load_spec(mapping_or_spec, for_model=model, trust_imports=trust_imports)
    device = device_type(device, model_device(model))
    rule = resolve_rule(mapping_or_spec, device)
    plan = _plan_model(model, rule, missing_ok)
    undo: list[Callable[[], None]] = []
    replaced: list[Replacement] = []
    try:
        for child, holders, replacement, how in plan:
            original = type(child)
            _swap(child, holders, replacement, how, undo)
            replaced.extend(Replacement(path, original, replacement, how) for _, _, path in holders)
        recorders = patch_output_recorders(model, rule, device=device)
        undo.append(recorders.remove)
        undo.append(record_swaps(model, [(r.original, r.replacement) for r in replaced if isinstance(r.original, type)]))
    except BaseException:
        for step in reversed(undo):
            step()
        invalidate()
        raise
    return PatchHandle(replaced, undo)
