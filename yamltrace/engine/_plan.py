"""Which modules a capture hooks: the walk of a model under its capture maps, and the plan cache.

`plan_hooks` lists, for each module a capture map selects, its dotted path and what to record
(transformers' order: children first; a nested model that declares its own map switches its subtree
to that map). Plans are cached per root module, so a repeated capture on an unchanged model does not
walk it again; `invalidate` marks them stale, `cache_info` reports on the cache.
"""

from __future__ import annotations

import operator
import weakref
from itertools import compress
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple, cast

from torch import nn
from torch.compiler import is_dynamo_compiling
from torch.nn.modules.module import register_module_module_registration_hook

from ._collector import Entry, HookPlan, HookRow, entry_of
from ._devices import require_devices
from ._recorder import OutputRecorder, normalize_output_map
from ._wrappers import child_path, wrapped_attribute

__all__ = [
    "CAPTURE_MAP_ATTRIBUTE",
    "HookPlan",
    "PlanGuard",
    "CacheInfo",
    "plan_hooks",
    "invalidate",
    "cache_info",
    "own_output_map",
    "MISSING",
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


_CHILDREN = operator.attrgetter("_modules")
_VALUES = dict.values


def _members(children: Iterable[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Each `_modules` dict's names and its modules' ids, to compare with an earlier reading. (Ids,
    so a cached plan holds no module; a reading compares equal only while the modules it names are
    alive — which `_CachedPlan.plan` and `PlanGuard` check first — so an id is never a reused one.)"""
    return [(*names, *map(id, modules)) for names, modules in zip(map(tuple, children), map(_VALUES, children))]


_new_row: Callable[[type[HookRow], tuple[Any, ...]], HookRow] = tuple.__new__
_DEREFERENCE = weakref.ref.__call__


class _CachedPlan:
    """A plan of one root, kept without strong references to its modules.

    `modules` holds a weak reference to every module the walk visited, with its class and its children
    then: a plan is reused only while all are alive, of the same class, with the very same children
    under the same names, and no registration or `invalidate` happened since (`generation`). Entries
    point into `modules` by position. (Children are compared by identity, not counted: an `insert`
    then a `pop` keeps a list's size and changes its members.)
    """

    __slots__ = ("generation", "modules", "classes", "children", "entries", "containers", "leaves", "container_children")

    def __init__(self, generation: int, visited: list[nn.Module], children: list[dict[str, Any]], plan: HookPlan) -> None:
        self.generation = generation
        self.modules = _watch(visited)  # the registration watch's weak references, one per module
        self.classes = list(map(type, visited))
        self.children = _members(children)
        # Which visited modules had children (for each `PlanGuard`, picked with `compress`).
        self.containers = list(map(bool, children))
        self.leaves = [not c for c in self.containers]
        self.container_children = list(compress(self.children, self.containers))
        position = {id(module): i for i, module in enumerate(visited)}
        self.entries = [(position[id(module)], path, entries) for module, path, entries in plan]

    def plan(self) -> tuple[HookPlan, PlanGuard] | None:
        """The plan and a guard over it, or None when it may be stale."""
        if self.generation != _generation:
            return None
        visited = list(map(_DEREFERENCE, self.modules))
        # A collected module dereferences to None, whose class differs from the recorded one.
        if list(map(type, visited)) != self.classes:
            return None
        alive = cast("list[nn.Module]", visited)  # every class matched: none was collected
        children = list(map(_CHILDREN, alive))
        if _members(children) != self.children:
            return None
        # `tuple.__new__` directly: `HookRow(...)` would run the named tuple's Python `__new__` per row.
        rows = [_new_row(HookRow, (alive[i], path, entries)) for i, path, entries in self.entries]
        return rows, PlanGuard(self, alive, children)


class PlanGuard:
    """Whether a plan still describes its model: `holds(root)`, as exact as the plan cache and cheaper.

    It keeps strong references to the visited modules below the root (no weak references to follow;
    the root itself is passed in, so a guard never keeps it alive), for hooks that stay installed on
    them anyway (`_held`), and to every visited module's `_modules` dict: it checks the generation,
    the root's class, the members (names and modules, by identity) of each dict that had children,
    that the dicts that had none still have none, then each module's class. Reading the dicts kept, rather than each module's `_modules`
    attribute (`nn.Module` defines `__getattr__`, so every attribute read takes the slow path), is
    cheaper; so is testing the empty ones for truth (`any`, no call per dict) instead of taking their
    sizes (a `len` call each) on a transformer, whose modules are mostly leaves (figures:
    docs/performance.md). Any change of a container's members is seen (`insert`, `pop`, `del`, an
    assignment into `_modules` by hand); replacing a module's whole `_modules` dict by hand is the
    direct edit docs/capture.md leaves to `invalidate()`.
    """

    __slots__ = ("_generation", "_modules", "_root_class", "_containers", "_leaves", "_classes", "_members")

    def __init__(self, cached: _CachedPlan, visited: list[nn.Module], children: list[dict[str, Any]]) -> None:
        self._generation = cached.generation
        self._modules = visited[1:]
        self._root_class = cached.classes[0]
        # Each visited module's `_modules`: those with children (and their members then), the others.
        self._containers = list(compress(children, cached.containers))
        self._members = cached.container_children
        self._leaves = list(compress(children, cached.leaves))
        self._classes = cached.classes[1:]

    def holds(self, root: nn.Module) -> bool:
        return (
            self._generation == _generation
            and type(root) is self._root_class
            and not any(self._leaves)
            and _members(self._containers) == self._members
            and list(map(type, self._modules)) == self._classes
        )


# Plans by root module, then by (tasks, wanted keys, nested_maps). Weak keys: the cache never keeps a
# model alive, and its values hold only weak references to modules.
_plans: weakref.WeakKeyDictionary[nn.Module, dict[tuple[Any, ...], _CachedPlan]] = weakref.WeakKeyDictionary()
# Bumped by every submodule registration into a module some cached plan visited (once the hook is
# installed) and by `invalidate`: a cached plan built under an older generation is rebuilt.
# Registrations elsewhere (a forward slicing a ModuleList builds a new one) leave plans valid.
_generation = 0
# Modules some cached plan visited, by id, with a weak reference that removes its entry when the
# module is collected (before its id can be reused). A dict of ids, not a WeakSet: the registration
# hook tests membership on every submodule registration of every model in the process (Llama slices
# its layer list in each forward), and `id(m) in dict` costs a fraction of `m in weakset`.
_watched: dict[int, _Watch] = {}
_registration_handle: Any = None
# Cache hits and misses, for `cache_info`.
_stats = [0, 0]


def invalidate() -> None:
    """Mark every cached hook plan stale, so the next capture walks its model again.

    Submodule assignments and deletions (through `nn.Module`'s API and the container methods) and
    class reassignments are detected without it. Call it after changing the capture map of a
    submodule (`_can_record_outputs` on an instance or a class, or a map edited in place); the root's
    own map is read on every capture. `patch_model` and `patch_output_recorders` call it.
    """
    global _generation
    _generation += 1


class _Watch(weakref.ref):  # type: ignore[type-arg]
    """A weak reference to a watched module that knows the module's id (its key in `_watched`)."""

    __slots__ = ("key",)

    def __init__(self, module: nn.Module, callback: Callable[[_Watch], None]) -> None:
        super().__init__(module, callback)  # type: ignore[call-arg]
        self.key = id(module)  # (set with the reference: its callback reads it)


def _watch(modules: Iterable[nn.Module]) -> list[_Watch]:
    """Watch `modules` for submodule registrations; their weak references, in order (a cached plan
    keeps them: one weak reference per module for both)."""
    references = []
    for module in modules:
        key = id(module)
        reference = _watched.get(key)
        if reference is None:
            reference = _watched[key] = _Watch(module, _unwatch)
        references.append(reference)
    return references


def _unwatch(reference: _Watch) -> None:
    # Called as the module is collected, before its id can be reused.
    if _watched.get(reference.key) is reference:
        del _watched[reference.key]


def _on_module_registration(module: nn.Module, name: str, submodule: nn.Module | None) -> None:
    # Skipped while torch.compile traces a forward: registrations there build throwaway containers
    # (a sliced ModuleList), and reading the table would make dynamo guard on its contents, and
    # iterate it while weak-reference callbacks of modules collected meanwhile change it
    # ("dictionary changed size during iteration"). So the compile test comes first: dynamo's own
    # (one call per registration, where is_compiling makes two; Llama registers each layer per forward).
    if not is_dynamo_compiling() and id(module) in _watched:
        invalidate()


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
    `keys`, when given, limits the plan to those output keys. Plans are cached per root (see
    `invalidate`). With `guarded`, returns `(plan, PlanGuard)`.
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
        found = entry.plan()
        if found is not None:
            _stats[0] += 1
            return found if guarded else found[0]
    _stats[1] += 1
    require_devices(tasks)
    generation = _generation
    plan, visited, children = _walk(root, tasks, wanted, nested_maps)
    entry = cached[cache_key] = _CachedPlan(generation, visited, children, plan)
    return (plan, PlanGuard(entry, visited, children)) if guarded else plan


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


class CacheInfo(NamedTuple):
    """Plans taken from the cache (hits) and built by walking a model (misses); models with plans,
    plans in all, and the current generation."""

    hits: int
    misses: int
    models: int
    plans: int
    generation: int


def cache_info() -> CacheInfo:
    """A snapshot of the plan cache (for tests and diagnostics; it never keeps a model alive)."""
    entries = list(_plans.values())
    return CacheInfo(_stats[0], _stats[1], len(entries), sum(map(len, entries)), _generation)
