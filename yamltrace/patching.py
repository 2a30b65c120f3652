"""Applying a patch mapping: while a model is built (`apply_patches`), to a built model (`patch_model`),
and to the capture maps that name the replaced classes (`patch_output_recorders`).

Every function takes a mapping (`pattern -> replacement class`), a `Spec` (its `patches`, filtered by
device), or None for the registry of `patch_registry`; validates everything before changing anything;
and returns or yields something that undoes exactly what it did.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import inspect
import itertools
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch
from torch import nn

from .hooks import invalidate, own_output_map
from .patch_registry import MappingLike, find_key, find_replacement, resolve_mapping
from .recorder import normalize_output_map

__all__ = [
    "PatchError",
    "PatchHandle",
    "Replacement",
    "apply_patches",
    "patch_output_recorders",
    "patch_model",
    "retarget_output_map",
    "model_device",
]

# Held while `apply_patches` has module attributes replaced: a module attribute is process-wide, so
# construction under patches is serialised (re-entrant for nested blocks in one thread).
_construction_lock = threading.RLock()


class PatchError(ValueError):
    """A patch cannot be applied; `problems` lists every reason found (nothing was changed)."""

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(self.problems))


@dataclass(frozen=True)
class Replacement:
    """One change a patch made: where, from what, to what, and how.

    `how` is "attribute" (a module attribute rebound by `apply_patches`), "from_module" or "class"
    (a submodule swapped by `patch_model`), or "recorder" (a capture-map entry retargeted).
    """

    path: str
    original: type | str
    replacement: type
    how: str


class PatchHandle:
    """Undoes a patch: `remove()` restores what was replaced (idempotent); also a context manager."""

    def __init__(self, replaced: Iterable[Replacement], undo: Iterable[Callable[[], None]]) -> None:
        self.replaced = tuple(replaced)
        self._undo = list(undo)
        self._lock = threading.Lock()

    def remove(self) -> None:
        """Restore the originals, last change first. Calling it again does nothing."""
        with self._lock:
            undo, self._undo = self._undo, []
        for step in reversed(undo):
            step()
        invalidate()

    def __enter__(self) -> PatchHandle:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        return f"PatchHandle({len(self.replaced)} replaced, {'active' if self._undo else 'removed'})"


def model_device(model: nn.Module) -> str:
    """The device type ("cpu", "cuda", "mps", ...) of the model's first parameter or buffer; "cpu" if none."""
    for tensor in itertools.chain(model.parameters(), model.buffers()):
        return tensor.device.type
    return "cpu"


def _device_type(device: str | torch.device | None, default: str) -> str:
    return default if device is None else torch.device(device).type


# --------------------------------------------------------------------------------------------------
# apply_patches


def _target_modules(modules: Any) -> list[ModuleType]:
    """The Python modules to patch: modules, names of imported modules, or model classes (their MRO's modules)."""
    items = [modules] if isinstance(modules, (ModuleType, str, type)) else list(modules)
    found: dict[str, ModuleType] = {}
    for item in items:
        if isinstance(item, ModuleType):
            found[item.__name__] = item
        elif isinstance(item, str):
            module = sys.modules.get(item)
            if module is None:
                raise ValueError(f"apply_patches: module {item!r} is not imported; it never imports: import it first or pass the module.")
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


def _signature_problem(original: type, replacement: type) -> str | None:
    """Why `replacement(...)` cannot be called every way `original(...)` can, or None.

    Binds placeholders for each of the original's named parameters, passed positionally and then by
    keyword, to the replacement's signature (`inspect.signature(...).bind`), so nothing is built.
    """
    try:
        expected, actual = inspect.signature(original), inspect.signature(replacement)
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
    return None


def _attribute_plan(modules: list[ModuleType], mapping: Mapping[str, type]) -> list[tuple[ModuleType, str, type, type]]:
    """(module, attribute, original, replacement) for each `nn.Module` class attribute the mapping selects."""
    plan = []
    for module in modules:
        for name, value in list(vars(module).items()):
            if not (isinstance(value, type) and issubclass(value, nn.Module)):
                continue
            replacement = find_replacement(name, mapping)
            if replacement is not None and replacement is not value:
                plan.append((module, name, value, replacement))
    return plan


@contextlib.contextmanager
def apply_patches(
    mapping: MappingLike = None,
    *,
    modules: Any,
    device: str | torch.device | None = None,
) -> Iterator[tuple[Replacement, ...]]:
    """Build models with replacement classes: inside the block, the named modules' classes are swapped.

    Args:
        mapping: `pattern -> replacement class`, a `Spec`, or None for the registered mapping.
        modules: where to swap: a model class (the modules defining it and its bases), a module, an
            imported module's name, or a list of them. Nothing else in the process is touched; a
            composite model whose sub-models live in other modules needs those named too.
        device: selects a Spec's device-conditioned entries (default: torch's default device).

    Only attributes that are `nn.Module` subclasses are swapped. Each replacement's constructor is
    checked against the original's before anything changes (PatchError listing every mismatch). The
    originals are restored when the block exits, also on exception. Yields the `Replacement`s made.

    Module attributes are process-wide, so blocks are serialised by a lock: a second thread waits
    until the first block exits, and each builds with its own mapping only. Code building models in
    another thread *without* `apply_patches` while a block is open would see its classes; do not hold
    the block open longer than construction.
    """
    resolved = resolve_mapping(mapping, _device_type(device, torch.get_default_device().type))
    targets = _target_modules(modules)
    if not resolved:
        yield ()
        return
    with _construction_lock:
        plan = _attribute_plan(targets, resolved)
        problems = [p for _, _, o, r in plan if (p := _signature_problem(o, r)) is not None]
        if problems:
            raise PatchError(dict.fromkeys(problems))
        done: list[tuple[ModuleType, str, type]] = []
        try:
            for module, name, original, replacement in plan:
                setattr(module, name, replacement)
                done.append((module, name, original))
            yield tuple(Replacement(f"{m.__name__}.{n}", o, r, "attribute") for m, n, o, r in plan)
        finally:
            for module, name, original in reversed(done):
                setattr(module, name, original)


# --------------------------------------------------------------------------------------------------
# patch_output_recorders


def _retarget(key: str, recorder: Any, mapping: Mapping[str, type]) -> tuple[Any, Replacement | None]:
    """The recorder with its target swapped for the mapping's replacement (transformers' rules)."""
    if isinstance(recorder, (str, type)):
        name = recorder if isinstance(recorder, str) else recorder.__name__
        replacement = find_replacement(name, mapping)
        if replacement is None or replacement is recorder:
            return recorder, None
        return replacement, Replacement(key, recorder, replacement, "recorder")
    normalized = normalize_output_map({key: recorder})[0][1]
    name = normalized.class_name if normalized.target_class is None else normalized.target_class.__name__
    replacement = find_replacement(name, mapping)
    if replacement is None or replacement is normalized.target_class:
        return recorder, None
    original = normalized.target_class or normalized.class_name
    return dataclasses.replace(normalized, target_class=replacement), Replacement(key, original, replacement, "recorder")


def retarget_output_map(output_map: Mapping[str, Any], mapping: Mapping[str, type]) -> tuple[dict[str, Any], list[Replacement]]:
    """A copy of a `_can_record_outputs` map with every recorder retargeted, and what changed."""
    result: dict[str, Any] = {}
    changes: list[Replacement] = []
    for key, recorders in output_map.items():
        single = not isinstance(recorders, (list, tuple))
        retargeted = []
        for recorder in [recorders] if single else recorders:
            new, change = _retarget(key, recorder, mapping)
            retargeted.append(new)
            if change is not None:
                changes.append(change)
        result[key] = retargeted[0] if single else retargeted
    return result, changes


def _set_instance_map(module: nn.Module, output_map: dict[str, Any]) -> Callable[[], None]:
    """Give `module` its own capture map (an instance attribute); returns the undo."""
    had_own = "_can_record_outputs" in vars(module)
    previous = vars(module).get("_can_record_outputs")
    setattr(module, "_can_record_outputs", output_map)
    invalidate()

    def undo() -> None:
        if had_own:
            setattr(module, "_can_record_outputs", previous)
        else:
            vars(module).pop("_can_record_outputs", None)
        invalidate()

    return undo


def patch_output_recorders(
    model: nn.Module,
    mapping: MappingLike = None,
    *,
    device: str | torch.device | None = None,
) -> PatchHandle:
    """Retarget the recorders of every submodule's capture map to their replacements, for this model only.

    Each recorder (OutputRecorder, class or class-name string; single or in a list) whose class name
    the mapping selects now targets the replacement, so capture hooks fire on replacement instances.
    The retargeted map is set on each *instance*: the class, and models built later, are untouched.
    `device` selects a Spec's entries (default: the model's device). Returns a handle that restores.
    """
    resolved = resolve_mapping(mapping, _device_type(device, model_device(model)))
    updates = []
    for path, module in model.named_modules():
        output_map = own_output_map(module)
        if isinstance(output_map, Mapping) and output_map:
            retargeted, changes = retarget_output_map(output_map, resolved)
            if changes:
                prefix = f"{path}._can_record_outputs" if path else "_can_record_outputs"
                changes = [dataclasses.replace(c, path=f"{prefix}[{c.path!r}]") for c in changes]
                updates.append((module, retargeted, changes))
    undo = [_set_instance_map(module, retargeted) for module, retargeted, _ in updates]
    return PatchHandle([c for _, _, changes in updates for c in changes], undo)


# --------------------------------------------------------------------------------------------------
# patch_model


def _adds_no_state(replacement: type, original: type) -> bool:
    """Whether `replacement` subclasses `original` without an `__init__` or `__slots__` of its own."""
    if not issubclass(replacement, original):
        return False
    between = replacement.__mro__[: replacement.__mro__.index(original)]
    return not any("__init__" in vars(cls) or "__slots__" in vars(cls) for cls in between)


def _references(model: nn.Module) -> dict[int, tuple[nn.Module, list[tuple[nn.Module, str, str]]]]:
    """For each submodule (not the root): the module and every (parent, attribute, path) holding it."""
    refs: dict[int, tuple[nn.Module, list[tuple[nn.Module, str, str]]]] = {}
    for parent_path, parent in model.named_modules():
        for name, child in parent._modules.items():
            if child is not None:
                path = f"{parent_path}.{name}" if parent_path else name
                refs.setdefault(id(child), (child, []))[1].append((parent, name, path))
    return refs


def _plan_model(model: nn.Module, mapping: Mapping[str, type], missing_ok: bool):
    """What `patch_model` will do, deepest modules first; PatchError listing every problem."""
    plan, problems, used = [], [], set()
    for child, holders in _references(model).values():
        key = find_key(type(child).__name__, mapping)
        if key is None:
            continue
        used.add(key)
        replacement, original = mapping[key], type(child)
        if isinstance(child, replacement):
            continue
        if callable(getattr(replacement, "from_module", None)):
            how = "from_module"
        elif _adds_no_state(replacement, original):
            how = "class"
        else:
            problems.append(
                f"{holders[0][2]} ({original.__module__}.{original.__qualname__}): cannot become "
                f"{replacement.__module__}.{replacement.__qualname__}: it has no from_module(original) classmethod "
                f"and is not a subclass of {original.__qualname__} that adds no state. Add a from_module classmethod "
                "that builds the replacement from the original module."
            )
            continue
        plan.append((child, holders, replacement, how))
    if not missing_ok:
        root = type(model).__name__
        names = sorted({type(m).__name__ for m in model.modules()} - {root})
        for key in mapping:
            if key not in used:
                hint = difflib.get_close_matches(key, names, n=1)
                why = " (the root module itself is never replaced)" if find_key(root, {key: nn.Module}) else ""
                problems.append(
                    f"Patch pattern {key!r} matches no submodule of {root}{why}"
                    + (f"; did you mean {hint[0]!r}?" if hint else "")
                    + "; fix the pattern or pass missing_ok=True."
                )
    if problems:
        raise PatchError(problems)
    plan.sort(key=lambda item: -min(path.count(".") for _, _, path in item[1]))
    return plan


def _swap(child: nn.Module, holders, replacement: type, how: str, undo: list[Callable[[], None]]) -> None:
    """Make every holder of `child` hold its replacement; append the undo steps."""
    original = type(child)
    if how == "class":
        child.__class__ = replacement
        invalidate()
        undo.append(lambda: setattr(child, "__class__", original))
        return
    try:
        new = replacement.from_module(child)
    except Exception as error:
        raise PatchError([f"{holders[0][2]}: {replacement.__qualname__}.from_module failed: {error}"]) from error
    if not isinstance(new, nn.Module):
        raise PatchError([f"{holders[0][2]}: {replacement.__qualname__}.from_module returned {type(new).__name__}, not a module."])
    new.training = child.training
    for parent, name, _ in holders:
        setattr(parent, name, new)
        undo.append(lambda parent=parent, name=name: setattr(parent, name, child))
    invalidate()


def patch_model(
    model: nn.Module,
    mapping_or_spec: MappingLike,
    *,
    missing_ok: bool = False,
    device: str | torch.device | None = None,
) -> PatchHandle:
    """Replace the submodules of a built model whose class the mapping selects; returns the undo handle.

    Each match is rebuilt by the replacement's `from_module(original)` classmethod (which should share
    the original's parameters and buffers), or, for a subclass that adds no state, by reassigning its
    class (parameters, buffers, hooks untouched). Training mode is kept. Deeper modules are replaced
    first; the root module itself is never replaced. Capture maps are retargeted too
    (`patch_output_recorders`), so `trace` and `capture_outputs` record the replacements.

    Fails with PatchError, changing nothing, when a match cannot be converted or a pattern matches no
    module (unless `missing_ok`). `device` selects a Spec's entries (default: the model's device).
    `handle.replaced` lists what was replaced; `handle.remove()` restores the originals.
    """
    device_type = _device_type(device, model_device(model))
    mapping = resolve_mapping(mapping_or_spec, device_type)
    plan = _plan_model(model, mapping, missing_ok)
    undo: list[Callable[[], None]] = []
    replaced: list[Replacement] = []
    try:
        for child, holders, replacement, how in plan:
            original = type(child)
            _swap(child, holders, replacement, how, undo)
            replaced.extend(Replacement(path, original, replacement, how) for _, _, path in holders)
        recorders = patch_output_recorders(model, mapping, device=device_type)
        undo.append(recorders.remove)
    except BaseException:
        for step in reversed(undo):
            step()
        invalidate()
        raise
    return PatchHandle(replaced, undo)
