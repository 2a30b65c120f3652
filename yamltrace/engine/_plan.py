"""Which modules a capture hooks: the walk of a model under its capture maps, and its guard.

`plan_hooks` lists, for each module a capture map selects, its dotted path and what to record
(transformers' order: children first; a nested model that declares its own map switches its subtree
to that map). It walks the model every time: whoever keeps a plan (`_plans`, `_held`) keeps the walk's
`PlanGuard` with it, which says whether the model still has the structure the walk read;
`invalidate` makes every guard fail.

`ModelIndex` is the one walk a plan is made from: every module's path, logical path (wrappers seen
through), class, `_modules`; planning and the checks read it (`scope_modules`, `decorated_paths`, the
attention-weight check) instead of walking the model again, and the kept plan's guard is made from it.

The devices a recorder moves tensors to must exist (`require_devices`): checked as the walk plans,
so a spec's `to: cuda` loads anywhere and fails at once, naming the key and the device, on a
machine without it, instead of torch's assertion from inside a hook.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import chain
from typing import Any

import torch
from torch import nn

from .._recorder import OutputRecorder, normalize_output_map
from ..errors import CaptureError
from ._collector import Entry, HookPlan, HookRow, entry_of
from ._wrappers import child_path, wrapped_attribute

__all__ = [
    "CAPTURE_MAP_ATTRIBUTE",
    "HookPlan",
    "ModelIndex",
    "PlanGuard",
    "plan_hooks",
    "invalidate",
    "own_output_map",
    "MISSING",
    "require_devices",
]

# What `own_output_map` returns for a module that declares no capture map.
MISSING = object()
# The attribute a module declares its capture map in (transformers' name).
CAPTURE_MAP_ATTRIBUTE = "_can_record_outputs"
_MODULE_GETATTR = nn.Module.__getattr__


def own_output_map(module: nn.Module, class_maps: dict[type[nn.Module], Any] | None = None) -> Any:
    """The capture map a module declares (instance attribute first, then class), or a sentinel if none.

    A module that declares one — even `None` or `{}`, as every transformers `PreTrainedModel` does — is a
    model boundary: the subtree below it follows its own map (transformers' rule for composite models). `class_maps` memoises
    the class's part by class, for a caller that asks of many modules while no class can change (a
    plan walk: a transformer has a dozen classes for a hundred modules).
    """
    value = module.__dict__.get(CAPTURE_MAP_ATTRIBUTE, MISSING)
    if value is not MISSING:
        return value
    cls = type(module)
    if class_maps is None:
        value = _class_map(cls)
    else:
        value = class_maps.get(cls, _UNSEEN)
        if value is _UNSEEN:
            value = class_maps[cls] = _class_map(cls)
    return getattr(module, CAPTURE_MAP_ATTRIBUTE, MISSING) if value is _PER_INSTANCE else value


# What `_class_map` returns when the map must be read on the instance; a class not looked up yet.
_PER_INSTANCE = object()
_UNSEEN = object()


def _class_map(cls: type[nn.Module]) -> Any:
    """The map `cls` declares for every instance without its own (`MISSING` if none), or
    `_PER_INSTANCE` when reading it needs the instance: a descriptor, or a class with its own
    `__getattr__` (a wrapper forwarding attributes to its wrapped module).

    Reads the class directly: `nn.Module.__getattr__`, which raises and catches `AttributeError` for
    every module without a map, runs only for those classes.
    """
    value = getattr(cls, CAPTURE_MAP_ATTRIBUTE, MISSING)
    if value is MISSING:
        return MISSING if cls.__getattr__ is _MODULE_GETATTR else _PER_INSTANCE
    if type(value) is dict:  # the usual map (`hasattr` below raises and catches for it)
        return value
    return _PER_INSTANCE if hasattr(type(value), "__get__") else value


_VALUES = dict.values
_chain = chain.from_iterable
# `tuple.__new__` directly: `HookRow(...)` would run the named tuple's Python `__new__` per row.
_new_row: Callable[[type[HookRow], tuple[Any, ...]], HookRow] = tuple.__new__


def _members(children: list[dict[str, Any]]) -> tuple[list[int], list[str], list[int]]:
    """The `_modules` dicts' sizes, then all their names and all their modules' ids in order, to compare
    with an earlier reading (the sizes keep each dict's part apart; the guard holds the modules it
    read, so an id compared is never a reused one). Flat lists: compared in C, no tuple per dict."""
    return list(map(len, children)), list(_chain(children)), list(map(id, _chain(map(_VALUES, children))))


class PlanGuard:
    """Whether a plan still describes its model: `holds(root)`.

    Built from the walk that made the plan, it keeps the visited modules below the root (the root
    itself is passed in, so a guard never keeps it alive) and every visited module's `_modules` dict,
    and checks: no `invalidate()` since, the root's class, the members (names and modules, by
    identity) of each dict that had children, that the dicts that had none still have none, then each
    module's class. So any change of a container's members is seen (`insert`, `pop`, `del`, an
    assignment into `_modules` by hand, an `insert` then a `pop` that keeps the size), and a class
    reassigned; replacing a module's whole `_modules` dict by hand is the direct edit docs/capture.md
    leaves to `invalidate()`. Reading the dicts kept is cheaper than each module's `_modules`
    attribute (`nn.Module.__getattr__`'s slow path); testing the empty ones for truth (`any`) cheaper
    than taking their sizes on a transformer, whose modules are mostly leaves.
    """

    __slots__ = ("_generation", "_modules", "_root_class", "_containers", "_leaves", "_classes", "_members")

    def __init__(self, generation: int, visited: list[nn.Module], children: list[dict[str, Any]]) -> None:
        self._generation = generation
        self._modules = visited[1:]
        self._root_class = type(visited[0])
        self._containers = [c for c in children if c]
        self._members = _members(self._containers)
        self._leaves = [c for c in children if not c]
        self._classes = list(map(type, self._modules))

    def holds(self, root: nn.Module) -> bool:
        return (
            self._generation == _generation
            and type(root) is self._root_class
            and not any(self._leaves)
            and _members(self._containers) == self._members
            and list(map(type, self._modules)) == self._classes
        )


class ModelIndex:
    """One walk of a model from its root, in `named_modules`' order (parents first), each path once (a
    module held at two paths appears at both; a module holding one of its ancestors does not recurse):
    `paths` (dotted, "" for the root), `logical` (the same without wrapped attributes: `_wrappers`),
    `modules`, `children` (each one's `_modules` dict, read once), `wrappers` (whether it wraps).

    `subtree(path)` is `named_modules()` of the module at `path` with logical paths and wrappers left
    out (what a scope's recorders match), `named()` the root's `named_modules()`; `guard()` the plan
    guard of what was read.
    """

    __slots__ = ("generation", "paths", "logical", "modules", "children", "wrappers", "_at")

    def __init__(self, root: nn.Module) -> None:
        self.generation = _generation
        paths: list[str] = []
        logical: list[str] = []
        modules: list[nn.Module] = []
        children: list[dict[str, Any]] = []
        wrappers: list[bool] = []
        above: set[int] = set()  # the ids of the modules on the current path (a cycle stops there)

        def visit(module: nn.Module, path: str, logic: str) -> None:
            paths.append(path)
            logical.append(logic)
            modules.append(module)
            kids = module._modules
            children.append(kids)
            wrapped = wrapped_attribute(module)
            wrappers.append(wrapped is not None)
            above.add(id(module))
            seen = set()
            for name, child in kids.items():
                if child is None or child in seen or id(child) in above:
                    continue
                seen.add(child)
                visit(
                    child, f"{path}.{name}" if path else name, logic if name == wrapped else f"{logic}.{name}" if logic else name
                )
            above.discard(id(module))

        visit(root, "", "")
        self.paths, self.logical, self.modules, self.children, self.wrappers = paths, logical, modules, children, wrappers
        self._at: dict[str, int] = {}
        for number, path in enumerate(paths):
            self._at.setdefault(path, number)

    def guard(self) -> PlanGuard:
        """Whether the model still has the structure this walk read (for whoever keeps a plan made from it)."""
        return PlanGuard(self.generation, self.modules, self.children)

    def _span(self, path: str) -> range:
        """The positions of the module at `path` and of everything below it (a contiguous run: parents first)."""
        start = self._at.get(path)
        if start is None:
            raise AttributeError(f"{type(self.modules[0]).__name__} has no submodule {path!r}")
        prefix, end = f"{path}." if path else "", start + 1
        while end < len(self.paths) and self.paths[end].startswith(prefix):
            end += 1
        return range(start, end)

    def _once(self, path: str) -> list[int]:
        """The positions in `_span(path)` of each module's first path (as `named_modules` dedups)."""
        seen: set[int] = set()
        found = []
        for number in self._span(path):
            if id(self.modules[number]) not in seen:
                seen.add(id(self.modules[number]))
                found.append(number)
        return found

    def named(self, path: str = "") -> list[tuple[str, nn.Module]]:
        """`get_submodule(path).named_modules()`: (path relative to it, module), each module once."""
        cut = len(path) + 1 if path else 0
        return [(self.paths[number][cut:], self.modules[number]) for number in self._once(path)]

    def subtree(self, path: str) -> list[tuple[str, str, nn.Module]]:
        """(path relative to the module at `path`, its logical path relative to it, module) for each
        module `named(path)` gives that is no wrapper (what a recorder's `matches` sees)."""
        numbers = self._once(path)
        cut = len(path) + 1 if path else 0
        base = self.logical[numbers[0]]
        logical_cut = len(base) + 1 if base else 0
        return [
            (self.paths[number][cut:], self.logical[number][logical_cut:], self.modules[number])
            for number in numbers
            if not self.wrappers[number]
        ]


# Bumped by `invalidate`: a guard made under an older generation no longer holds.
_generation = 0


def invalidate() -> None:
    """Mark every kept plan stale, so the next capture plans its model again.

    Submodule assignments, insertions and deletions (through `nn.Module`'s API, the container
    methods, or `_modules` by hand) and class reassignments are detected without it. Call it after
    changing the capture map of a submodule (`_can_record_outputs` on an instance or a class, or a
    map edited in place); the root's own map is read on every capture. `patch_model` and
    `patch_output_recorders` call it.
    """
    global _generation
    _generation += 1


def plan_hooks(
    root: nn.Module,
    tasks: Iterable[tuple[str, OutputRecorder]],
    *,
    nested_maps: bool,
    keys: Iterable[str] | None = None,
    guarded: bool = False,
) -> Any:
    """Walk `root` and list the modules each task hooks, in transformers' order (children first).

    With `nested_maps`, a child that declares its own capture map switches its subtree to that map.
    `keys`, when given, limits the plan to those output keys. With `guarded`, returns
    `(plan, PlanGuard)`: whether the plan still describes the model, for whoever keeps it.
    """
    tasks = tuple(tasks)
    require_devices(tasks)
    generation = _generation
    plan, visited, children = _walk(root, tasks, None if keys is None else frozenset(keys), nested_maps)
    return (plan, PlanGuard(generation, visited, children)) if guarded else plan


def _walk(
    root: nn.Module, tasks: tuple[tuple[str, OutputRecorder], ...], wanted: frozenset[str] | None, nested_maps: bool
) -> tuple[HookPlan, list[nn.Module], list[dict[str, Any]]]:
    """The plan of `root`, every module visited, and each one's `_modules` (read once: a slow attribute)."""
    plan: HookPlan = []
    visited: list[nn.Module] = []
    children_of: list[dict[str, Any]] = []
    class_maps: dict[type[nn.Module], Any] = {}  # nothing can change a class while the walk runs

    def visit(module: nn.Module, path: str, checks: tuple[tuple[Callable[[nn.Module, str], bool], Entry], ...]) -> None:
        visited.append(module)
        children = module._modules
        children_of.append(children)
        wrapped = wrapped_attribute(module)
        seen = set()
        for name, child in children.items():
            # The children `named_children` yields: set, and each distinct module once.
            if child is None or child in seen:
                continue
            seen.add(child)
            child_checks = checks
            if nested_maps:
                child_map = own_output_map(child, class_maps)
                if child_map is not MISSING:
                    child_checks = _checks(normalize_output_map(child_map or {}), wanted)
            visit(child, child_path(path, name, wrapped), child_checks)
        if wrapped is not None:
            return  # a wrapper records nothing, its wrapped module does (paths without wrappers: _wrappers)
        entries = []
        for matches, entry in checks:
            if matches(module, path):
                entries.append(entry)
        if entries:
            plan.append(_new_row(HookRow, (module, path, tuple(entries))))

    visit(root, "", _checks(tasks, wanted))
    return plan, visited, children_of


def _checks(
    tasks: Iterable[tuple[str, OutputRecorder]], wanted: frozenset[str] | None
) -> tuple[tuple[Callable[[nn.Module, str], bool], Entry], ...]:
    """For each task whose key is wanted: its recorder's `matches` and the plan entry it adds."""
    return tuple((recorder.matcher(), entry_of(key, recorder)) for key, recorder in tasks if wanted is None or key in wanted)


def _available(device: torch.device) -> bool:
    if device.type == "cuda":
        return torch.cuda.is_available() and (device.index is None or device.index < torch.cuda.device_count())
    if device.type == "mps":
        return torch.backends.mps.is_available()
    return True


def require_devices(tasks: Iterable[tuple[str, OutputRecorder]]) -> None:
    """CaptureError unless every recorder's `to` device is available on this machine."""
    for key, recorder in tasks:
        if recorder.to is not None and not _available(torch.device(recorder.to)):
            raise CaptureError(
                f"output {key!r}: its recorder moves captures to {recorder.to!r}, which this machine does not have "
                f"(torch sees {torch.cuda.device_count()} CUDA device(s)); remove `to:` or capture on a machine with it."
            )
