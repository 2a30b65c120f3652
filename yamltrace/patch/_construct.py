"""Construction-time swaps: `apply_patches` rebinds model classes in their modules while a model is built.

Module attributes are process-wide, so blocks are serialised by a lock, and every attribute changed is
restored on exit, whatever happens inside the block or while the swaps are being made.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import threading
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import torch
from torch import nn

from .._forwards import constructor_signature, forward_problem
from ..errors import PatchError, PatchProblem
from ..spec._patch_rule import PatchRule, device_type
from ._handle import Replacement
from ._registry import MappingLike, resolve_rule
from ._state import checked_construction

__all__ = ["SPREAD_PACKAGES", "apply_patches", "construction_modules"]

# Held while `apply_patches` has module attributes replaced: a module attribute is process-wide, so
# construction under patches is serialised (re-entrant for nested blocks in one thread).
_construction_lock = threading.RLock()


def _transformers_modules() -> list[ModuleType]:
    """Every loaded module whose name starts with `transformers` (transformers' own reach)."""
    return [m for m in list(sys.modules.values()) if isinstance(m, ModuleType) and m.__name__.startswith("transformers")]


def _target_modules(modules: Any) -> list[ModuleType]:
    """The Python modules to patch: modules, names of imported modules, or model classes (their MRO's modules)."""
    if modules is None:
        return _transformers_modules()
    items = [modules] if isinstance(modules, (ModuleType, str, type)) else list(modules)
    found: dict[str, ModuleType] = {}
    for item in items:
        if isinstance(item, ModuleType):
            found[item.__name__] = item
        elif isinstance(item, str):
            module = sys.modules.get(item)
            if module is None:
                raise ValueError(
                    f"apply_patches: module {item!r} is not imported; it never imports: import it first or pass the module."
                )
            found[item] = module
        elif isinstance(item, type) and issubclass(item, nn.Module):
            for cls in item.__mro__:
                module = sys.modules.get(cls.__module__)
                if module is not None and issubclass(cls, nn.Module) and cls.__module__.partition(".")[0] != "torch":
                    found.setdefault(cls.__module__, module)
        else:
            raise TypeError(
                f"apply_patches(modules=...) takes modules, imported module names or nn.Module classes, got {item!r}."
            )
    return list(found.values())


# Libraries whose models are built from classes spread over their package's modules (a diffusers UNet's
# blocks, transformer blocks and attention live in four modules, each importing the next class by name),
# unlike transformers' one file per model: a model of one of them is built under patches in every loaded
# module of its package (`construction_modules`), as transformers' `apply_patches()` reaches every
# transformers module.
SPREAD_PACKAGES = frozenset({"diffusers"})


def construction_modules(model_class: type) -> list[Any]:
    """What `apply_patches(modules=...)` needs to build `model_class` under patches: the class itself (the
    modules defining it and its bases) and, for a model of a `SPREAD_PACKAGES` library, every loaded
    module of that package. Nothing is imported."""
    package = model_class.__module__.partition(".")[0]
    if package not in SPREAD_PACKAGES:
        return [model_class]
    loaded = [m for name, m in list(sys.modules.items()) if isinstance(m, ModuleType) and name.partition(".")[0] == package]
    return [model_class, *sorted(loaded, key=lambda m: m.__name__)]


def _signature_problem(original: type, replacement: type) -> str | None:
    """Why `replacement(...)` cannot be called every way `original(...)` can (or its forward would ignore a keyword), or None.

    Binds placeholders for each of the original's named parameters, passed positionally and then by
    keyword, to the replacement's signature (`inspect.signature(...).bind`), so nothing is built. Both
    constructors are read through the decorators that wrap them (`constructor_signature`).
    """
    try:
        expected, actual = constructor_signature(original), constructor_signature(replacement)
    except (TypeError, ValueError):
        return None
    no_return = inspect.Signature.empty
    expected, actual = expected.replace(return_annotation=no_return), actual.replace(return_annotation=no_return)
    params = [p for p in expected.parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    keyword = [p.name for p in params if p.kind is p.KEYWORD_ONLY]
    by_keyword = [p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
    only_positional = [p.name for p in params if p.kind is p.POSITIONAL_ONLY]
    calls = [(positional, keyword), (only_positional, by_keyword + keyword)]
    for args, kwargs in calls:
        try:
            actual.bind(*args, **{name: name for name in kwargs})
        except TypeError as error:
            shown = ", ".join([*args, *(f"{name}=..." for name in kwargs)])
            return (
                f"{replacement.__module__}.{replacement.__qualname__}{actual} cannot replace "
                f"{original.__module__}.{original.__qualname__}{expected}: called as ({shown}): {error}. "
                "Give the replacement a constructor that accepts the original's arguments."
            )
    return forward_problem(original, replacement)


def _attribute_plan(modules: list[ModuleType], rule: PatchRule) -> list[tuple[ModuleType, str, type, type]]:
    """(module, attribute, original, replacement) for each `nn.Module` class attribute the rule selects.

    Reads each module's namespace as it is (`vars`): nothing is imported, also not a lazy module's
    attributes that were never loaded."""
    plan = []
    for module in modules:
        for name, value in list(vars(module).items()):
            if not (isinstance(value, type) and issubclass(value, nn.Module)):
                continue
            replacement = rule.replacement_for(name)
            if replacement is not None and replacement is not value:
                plan.append((module, name, value, replacement))
    return plan


@contextlib.contextmanager
def apply_patches(
    mapping: MappingLike = None,
    *,
    modules: Any = None,
    device: str | torch.device | None = None,
) -> Iterator[tuple[Replacement, ...]]:
    """Build models with replacement classes: inside the block, the selected modules' classes are swapped.

    Args:
        mapping: `pattern -> replacement class`, a `Spec`, or None for the registered mapping.
        modules: where to swap: a model class (the modules defining it and its bases), a module, an
            imported module's name, or a list of them; nothing else in the process is touched (a
            composite model whose sub-models live in other modules needs those named too). This is
            the recommended form. None (the default, transformers' `apply_patches()`) swaps in every
            loaded module whose name starts with `transformers`: a process-wide change.
        device: selects a Spec's device-conditioned entries (default: torch's default device).

    Only attributes that are `nn.Module` subclasses are swapped, and no module is imported. With
    `modules=`, each replacement's constructor is checked against the original's before anything
    changes (PatchError listing every mismatch), and each replacement built is checked, before any
    weight is loaded, to hold the parameter and buffer names of the original built from the same
    arguments (`_state`); the process-wide form swaps what transformers swaps,
    so a class whose constructor does not fit fails when it is built. Every attribute changed is
    restored when the block exits, also when the block raises and when a swap fails halfway. Yields
    the `Replacement`s made.

    Thread safety: module attributes are process-wide, so blocks are serialised by a lock (re-entrant
    in one thread): a second thread's block waits until the first exits, and each builds with its own
    mapping only. Code that builds models in another thread *without* `apply_patches` while a block
    is open sees the replacements; keep the block to the construction.
    """
    rule = resolve_rule(mapping, device_type(device, torch.get_default_device().type))
    if not rule:
        yield ()
        return
    with _construction_lock:
        targets = _target_modules(modules)
        plan = _attribute_plan(targets, rule)
        problems = {} if modules is None else {p: n for _, n, o, r in plan if (p := _signature_problem(o, r)) is not None}
        if problems:
            raise PatchError(PatchProblem(message, name) for message, name in problems.items())
        done: list[tuple[ModuleType, str, type]] = []
        try:
            for module, name, original, replacement in plan:
                setattr(module, name, replacement)
                done.append((module, name, original))
            # With `modules=`, each replacement's state names are checked as it is built (`_state`).
            with checked_construction([] if modules is None else plan):
                yield tuple(Replacement(f"{m.__name__}.{n}", o, r, "attribute") for m, n, o, r in plan)
        finally:
            _restore(done)


def _restore(done: list[tuple[ModuleType, str, type]]) -> None:
    """Set every changed attribute back, last first; the first failure is raised after all were tried."""
    failure: BaseException | None = None
    for module, name, original in reversed(done):
        try:
            setattr(module, name, original)
        except BaseException as error:  # keep restoring the others
            failure = failure or error
    if failure is not None:
        raise failure
