"""The hook engine: which modules to hook for a capture map, and what a hook records.

A capture session (one decorated forward, or one `trace` block) owns a `Collector` and hooks the
planned modules for exactly as long as it runs, so a model whose capture is off carries nothing at
all. A hook is a listener on the module's forward (`yamltrace.intercept`), cheaper than a torch
forward hook; it records only when its session is the active one in the calling context (a
`ContextVar`), which keeps threads and nested models apart.

Plans are cached per root module (`plan_hooks`, `invalidate`), so a repeated capture on an unchanged
model does not walk it again.
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn
from torch.compiler import is_compiling
from torch.nn.modules.module import register_module_module_registration_hook

from .intercept import Interception, intercept
from .recorder import OutputRecorder, normalize_output_map

__all__ = ["Collector", "HookPlan", "plan_hooks", "install_hooks", "invalidate", "own_output_map", "resolve_positions"]

_MISSING = object()
_ATTRIBUTE = "_can_record_outputs"
_MODULE_GETATTR = nn.Module.__getattr__

# What a recorder's `detach` / `to` / `dtype` do to a captured value; None when it asks for nothing.
Transform = Callable[[Any], Any]
# A plan entry: (key, tuple index, prepend the first input as the initial hidden state, transform).
Entry = tuple[str, int, bool, Transform | None]
# A plan: for each hooked module, its dotted path and its entries.
HookPlan = list[tuple[nn.Module, str, tuple[Entry, ...]]]


def own_output_map(module: nn.Module) -> Any:
    """The capture map a module declares (instance attribute first, then class), or a sentinel if none.

    A module that declares one — even `None` or `{}`, as every transformers `PreTrainedModel` does — is a
    model boundary: the subtree below it follows its own map (REFERENCE rule 6).

    Reads the instance `__dict__` and the class directly: `nn.Module.__getattr__`, which raises and
    catches `AttributeError` for every module without a map, runs only for classes that define their
    own `__getattr__` (wrappers that forward attributes to a wrapped module).
    """
    value = module.__dict__.get(_ATTRIBUTE, _MISSING)
    if value is not _MISSING:
        return value
    cls = type(module)
    value = getattr(cls, _ATTRIBUTE, _MISSING)
    if value is _MISSING:
        return _MISSING if cls.__getattr__ is _MODULE_GETATTR else getattr(module, _ATTRIBUTE, _MISSING)
    if hasattr(type(value), "__get__"):
        # A property or other descriptor: evaluate it on the instance.
        return getattr(module, _ATTRIBUTE, _MISSING)
    return value


_CHILDREN = operator.attrgetter("_modules")
_DEREFERENCE = weakref.ref.__call__


class _CachedPlan:
    """A plan of one root, kept without strong references to its modules.

    `modules` holds a weak reference to every module the walk visited, with its class and number of
    children then: a plan is reused only while all are alive and unchanged and no structure change or
    `invalidate` happened since (`generation`). Entries point into `modules` by position.
    """

    __slots__ = ("generation", "modules", "classes", "sizes", "entries")

    def __init__(self, generation: int, visited: list[nn.Module], plan: HookPlan) -> None:
        self.generation = generation
        self.modules = [weakref.ref(module) for module in visited]
        self.classes = list(map(type, visited))
        self.sizes = list(map(len, map(_CHILDREN, visited)))
        position = {id(module): i for i, module in enumerate(visited)}
        self.entries = [(position[id(module)], path, entries) for module, path, entries in plan]
        _watched.update(visited)

    def plan(self) -> HookPlan | None:
        """The plan, or None when it may be stale."""
        if self.generation != _generation:
            return None
        visited = list(map(_DEREFERENCE, self.modules))
        # A collected module dereferences to None, whose class differs from the recorded one.
        if list(map(type, visited)) != self.classes:
            return None
        if list(map(len, map(_CHILDREN, visited))) != self.sizes:
            return None
        return [(visited[i], path, entries) for i, path, entries in self.entries]


# Plans by root module, then by (tasks, wanted keys, nested_maps). Weak keys: the cache never keeps a
# model alive, and its values hold only weak references to modules.
_plans: weakref.WeakKeyDictionary[nn.Module, dict[tuple, _CachedPlan]] = weakref.WeakKeyDictionary()
# Bumped by every submodule registration into a module some cached plan visited (once the hook is
# installed) and by `invalidate`: a cached plan built under an older generation is rebuilt.
# Registrations elsewhere (a forward slicing a ModuleList builds a new one) leave plans valid.
_generation = 0
_watched: weakref.WeakSet[nn.Module] = weakref.WeakSet()
_registration_handle: Any = None


def invalidate() -> None:
    """Mark every cached hook plan stale, so the next capture walks its model again.

    Submodule assignments and deletions (through `nn.Module`'s API and the container methods) and
    class reassignments are detected without it. Call it after changing the capture map of a
    submodule (`_can_record_outputs` on an instance or a class, or a map edited in place); the root's
    own map is read on every capture. `patch_model` and `patch_output_recorders` call it.
    """
    global _generation
    _generation += 1


def _on_module_registration(module: nn.Module, name: str, submodule: nn.Module | None) -> None:
    # Skipped while torch.compile traces a forward: registrations there build throwaway containers
    # (a sliced ModuleList), and reading the weak set would make dynamo guard on its contents.
    if not is_compiling() and module in _watched:
        invalidate()


def plan_hooks(
    root: nn.Module,
    tasks: Iterable[tuple[str, OutputRecorder]],
    *,
    nested_maps: bool,
    keys: Iterable[str] | None = None,
) -> HookPlan:
    """Walk `root` and list the modules each task hooks, in transformers' order (children first).

    With `nested_maps`, a child that declares its own capture map switches its subtree to that map.
    `keys`, when given, limits the plan to those output keys. Plans are cached per root (see
    `invalidate`).
    """
    global _registration_handle
    if _registration_handle is None:
        _registration_handle = register_module_module_registration_hook(_on_module_registration)
    tasks = tuple(tasks)
    wanted = None if keys is None else frozenset(keys)
    cache_key = (tasks, wanted, nested_maps)
    cached = _plans.get(root)
    if cached is None:
        cached = _plans.setdefault(root, {})
    entry = cached.get(cache_key)
    if entry is not None:
        plan = entry.plan()
        if plan is not None:
            return plan
    generation = _generation
    plan, visited = _walk(root, tasks, wanted, nested_maps)
    cached[cache_key] = _CachedPlan(generation, visited, plan)
    return plan


def _walk(
    root: nn.Module, tasks: tuple[tuple[str, OutputRecorder], ...], wanted: frozenset[str] | None, nested_maps: bool
) -> tuple[HookPlan, list[nn.Module]]:
    """The plan of `root`, and every module visited."""
    plan: HookPlan = []
    visited: list[nn.Module] = []

    def visit(module: nn.Module, path: str, checks: tuple[tuple[Callable[[nn.Module, str], bool], Entry], ...]) -> None:
        visited.append(module)
        seen = set()
        for name, child in module._modules.items():
            # The children `named_children` yields: set, and each distinct module once.
            if child is None or child in seen:
                continue
            seen.add(child)
            child_checks = checks
            if nested_maps:
                child_map = own_output_map(child)
                if child_map is not _MISSING:
                    child_checks = _checks(normalize_output_map(child_map or {}), wanted)
            visit(child, f"{path}.{name}", child_checks)
        entries = []
        for matches, entry in checks:
            if matches(module, path):
                entries.append(entry)
        if entries:
            plan.append((module, path, tuple(entries)))

    visit(root, "", _checks(tasks, wanted))
    return plan, visited


def _checks(
    tasks: Iterable[tuple[str, OutputRecorder]], wanted: frozenset[str] | None
) -> tuple[tuple[Callable[[nn.Module, str], bool], Entry], ...]:
    """For each task whose key is wanted: its recorder's `matches` and the plan entry it adds."""
    return tuple(
        (recorder.matches, (key, recorder.index, recorder.capture_initial_hidden_state, _transform(recorder)))
        for key, recorder in tasks
        if wanted is None or key in wanted
    )


def _transform(recorder: OutputRecorder) -> Transform | None:
    """What `recorder` does to a captured tensor (detach, then move/cast); None when it keeps the reference."""
    detach, device, dtype = recorder.detach, recorder.to, recorder.dtype
    if not detach and device is None and dtype is None:
        return None
    convert = device is not None or dtype is not None

    def transform(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        if detach:
            value = value.detach()
        return value.to(device=device, dtype=dtype) if convert else value

    return transform


def resolve_positions(selected: Iterable[int], total: int | None, what: str) -> frozenset[int]:
    """Resolve possibly negative positions against `total`; out-of-range positions select nothing."""
    selected = list(selected)
    if total is None:
        if any(i < 0 for i in selected):
            raise ValueError(
                f"Cannot select {what} with negative indices {selected}: the number of layers is unknown. "
                "Set it in the model's config (see the recorder's num_hidden_layers_key) or use indices >= 0."
            )
        return frozenset(selected)
    return frozenset(i % total for i in selected if -total <= i < total)


class Collector:
    """What one capture session has recorded so far: a list per requested key.

    `selections` maps a key to the positions to keep; other positions are recorded as `None`, so no
    tensor is retained for them. A kept value goes through its entry's transform, if any; without one
    the list holds the module's own object. `starts` says where the current forward's values begin
    in each list (a trace keeps every forward's values in one list); positions count from there.
    """

    __slots__ = ("lists", "selections", "starts", "last_transform")

    def __init__(self, keys: Iterable[str], selections: dict[str, frozenset[int]] | None = None) -> None:
        self.lists: dict[str, list[Any]] = {k: [] for k in keys}
        self.selections = selections or {}
        self.starts: dict[str, int] = {k: 0 for k in self.lists}
        # The transform applied to each key's latest kept value, so a value that replaces it later
        # (the tied last hidden state) gets the same treatment.
        self.last_transform: dict[str, Transform | None] = {}

    def _append(self, key: str, values: list[Any], value: Any, transform: Transform | None) -> None:
        selection = self.selections.get(key) if self.selections else None
        if selection is not None and len(values) - self.starts[key] not in selection:
            values.append(None)
        elif transform is None:
            values.append(value)
            if key == "hidden_states":
                self.last_transform[key] = None
        else:
            values.append(transform(value))
            self.last_transform[key] = transform

    def record(self, path: str, entries: tuple[Entry, ...], args: tuple, kwargs: dict, output: Any) -> None:
        """Record `output` (and, for the first hidden state, the module's input) for each entry."""
        lists = self.lists
        is_tuple = isinstance(output, tuple)
        for key, index, initial, transform in entries:
            values = lists.get(key)
            if values is None:
                continue
            if not is_tuple:
                value = output
            else:
                try:
                    value = output[index]
                except IndexError:
                    raise IndexError(
                        f"yamltrace: output {key!r} records element {index} of the output of module {path or '<root>'}, "
                        f"which returned a tuple of {len(output)}. Fix the recorder's index."
                    ) from None
            if key == "hidden_states":
                if initial and len(values) == self.starts[key]:
                    first_input = args[0] if args else next(iter(kwargs.values()), None)
                    self._append(key, values, first_input, transform)
                if value is not None:
                    self._append(key, values, value, transform)
            elif value is not None or not is_tuple:
                # A None element of a tuple is skipped; a module that returned None itself is kept.
                self._append(key, values, value, transform)


def install_hooks(plan: HookPlan, collector: Collector, is_active: Callable[[Collector], bool]) -> list[Interception]:
    """Intercept each planned module's forward, recording into `collector` while `is_active` says so.

    Interception (`yamltrace.intercept`) rather than forward hooks: a capture installs its listeners for
    every capturing forward, and a listener costs less to install and to call than a hook.
    """
    record = collector.record

    def listener(row: tuple[nn.Module, str, tuple[Entry, ...]], args: tuple, kwargs: dict, output: Any) -> None:
        if is_active(collector):
            record(row[1], row[2], args, kwargs, output)

    return [intercept([(row[0], listener, row) for row in plan])]


def remove_hooks(handles: list[Any]) -> None:
    """Remove every listener or hook in `handles` (idempotent)."""
    for handle in handles:
        handle.remove()
    handles.clear()
