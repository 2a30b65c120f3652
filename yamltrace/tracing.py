"""`trace`: capture submodule outputs of any `nn.Module` for the duration of a `with` block.

The model needs no cooperation: hooks go on when the block starts and come off when it ends. Each call
of the root module is one step; the yielded mapping holds every step's captures in call order (a
single forward gives exactly the model's own `output_hidden_states` / `output_attentions` tuples).

Captures follow transformers' scopes (`engine._scopes`): each decorated forward of the model (or each
scope of the spec) records into its own lists and ties its last hidden state at its own exit; the
outermost scopes are what the block yields, named as `exposed_names` says (`hidden_states`, or
`encoder_hidden_states` and `decoder_hidden_states` for an encoder-decoder; a multimodal composite's
language model keeps the plain names, its vision tower's are `vision_tower_hidden_states`, ...).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Union

from torch import nn

from ._captures import Captures
from ._trace_checks import check_patches, check_recorders, retarget_to_patches, warn_no_tensor
from .engine import (
    Collector,
    HookPlan,
    OutputRecorder,
    Session,
    decorated_paths,
    decorator_tie_last,
    exposed_names,
    install_hooks,
    intercept,
    is_under,
    normalized_tasks,
    outermost,
    own_output_map,
    plain_owners,
    plan_hooks,
    resolve_selections,
    tie_last_enabled,
    tie_last_hidden_state,
    tie_points,
    unwrap,
)
from .errors import did_you_mean
from .spec import Spec, load_spec

__all__ = ["trace", "Captures", "SpecLike"]

# What `trace` takes as a spec: a Spec, a spec file, or a `_can_record_outputs`-style dict.
SpecLike = Union[Spec, str, "os.PathLike[str]", Mapping[str, Any]]


@dataclass(eq=False)
class _Scope:
    """One capture scope of a trace: its module, recorders and options; what it records, if exposed."""

    number: int
    path: str
    module: nn.Module
    tasks: tuple[tuple[str, OutputRecorder], ...]
    nested_maps: bool
    options: Mapping[str, Any]
    exposed: bool = False
    plan: HookPlan = field(default_factory=list)
    collector: Collector | None = None


def _model_scopes(model: nn.Module) -> list[_Scope]:
    """The scopes of a model traced without a spec: its decorated forwards, else the root's own map."""
    decorated = decorated_paths(model)
    if decorated:
        return [
            _Scope(number, path, model.get_submodule(path), normalized_tasks(_map_of(model.get_submodule(path))), True, {})
            for number, path in enumerate(decorated)
        ]
    own = _map_of(model)
    if not own:
        raise ValueError(
            f"{type(model).__name__} declares no _can_record_outputs; pass trace(model, spec) with a Spec, "
            "a spec file or a {key: recorder} dict."
        )
    return [_Scope(0, "", model, normalized_tasks(own), True, {})]


def _map_of(module: nn.Module) -> Mapping[str, Any]:
    own = own_output_map(module)
    return own if isinstance(own, Mapping) else {}


def _spec_scopes(model: nn.Module, spec: Spec, root_tasks: Any, strict: bool) -> list[_Scope]:
    """The scopes a spec declares: the root (its top-level `outputs`) and each of its `scopes`."""
    scopes = []
    if spec.outputs or not spec.scopes:
        scopes.append(_Scope(0, "", model, tuple(root_tasks), False, dict(spec.options)))
    for path, scope in spec.scopes.items():
        try:
            module = model.get_submodule(path)
        except AttributeError:
            if strict and any(not r.optional for rs in scope.outputs.values() for r in rs):
                check_recorders(model, spec, {path: None})  # raises, located at the scope's recorders
            continue
        tasks = tuple((key, r) for key, recorders in scope.outputs.items() for r in recorders)
        scopes.append(_Scope(len(scopes), path, module, tasks, False, {**spec.options, **scope.options}))
    return scopes


def _resolve(model: nn.Module, spec: SpecLike | None, strict: bool) -> tuple[list[_Scope], Spec | None]:
    """The scopes `trace` records for its `spec` argument, and the explicit spec (None without one)."""
    if spec is None:
        attached = getattr(model, "yamltrace_spec", None)
        if attached is None:
            return _model_scopes(model), None
        # from_pretrained set the attached spec's top-level map on the instance, retargeted to patched
        # classes, and applied its patches: its scopes are retargeted the same way here.
        return _spec_scopes(model, retarget_to_patches(model, attached), normalized_tasks(_map_of(model)), strict=False), None
    if isinstance(spec, (str, os.PathLike)):
        spec = load_spec(spec, for_model=model)
    elif isinstance(spec, Mapping) and not isinstance(spec, Spec):
        spec = Spec(outputs=spec)
    if not isinstance(spec, Spec):
        raise TypeError(f"trace() takes a Spec, a spec path or a capture dict, got {type(spec).__name__}.")
    check_patches(model, spec)
    spec = retarget_to_patches(model, spec)
    root_tasks = tuple((key, r) for key, recorders in spec.outputs.items() for r in recorders)
    return _spec_scopes(model, spec, root_tasks, strict), spec


def _plan_scope(scope: _Scope, nested: list[str]) -> tuple[HookPlan, set[str]]:
    """The hooks of an exposed scope (none inside a nested scope), and the keys they record."""
    plan = []
    for module, path, entries in plan_hooks(scope.module, scope.tasks, nested_maps=scope.nested_maps):
        full = f"{scope.path}{path}" if scope.path else path[1:]
        if not any(is_under(full, n) for n in nested):
            plan.append((module, f".{full}" if full else "", entries))  # the path from the traced model
    return plan, {entry[0] for _, _, entries in plan for entry in entries}


def _position_counter(module: nn.Module, plan: HookPlan) -> Callable[[str, OutputRecorder], int]:
    """How many positions a key of a scope has (for negative `layers`): from the config, else hooks."""
    config = getattr(module, "config", None)

    def count_positions(key: str, recorder: OutputRecorder) -> int:
        layers = getattr(config, recorder.num_hidden_layers_key, None)
        if layers is None:
            layers = sum(1 for _, _, entries in plan if any(e[0] == key for e in entries))
        return layers + int(key == "hidden_states" and recorder.capture_initial_hidden_state)

    return count_positions


@contextlib.contextmanager
def trace(
    model: nn.Module,
    spec: SpecLike | None = None,
    *,
    outputs: str | Iterable[str] | None = None,
    strict: bool = True,
) -> Iterator[Captures]:
    """Capture the outputs a spec declares while the block runs; yields a read-only `key -> tuple` map.

    Args:
        model: any `nn.Module`; it does not need to declare anything.
        spec: a `Spec`, a spec file path, or a `_can_record_outputs`-style dict. `None` uses the spec
            attached by `from_pretrained`, else the capture maps of the model's decorated forwards
            (each records its own captures, as transformers does), else the root's own map.
        outputs: the keys to capture (default: every key).
        strict: with an explicit spec, a recorder that matches no module of the model is a `SpecError`
            located at the recorder (unless marked `optional`); `strict=False` makes it a warning.

    Yields:
        `Captures`: a read-only mapping `key -> tuple`, all calls of `model` in the block concatenated
        (`captures.steps` keeps them apart), complete when the block exits. Each value knows its module:
        `captures.paths(key)`, `captures.by_path(key)`, `captures.stack(key)`.

    Raises:
        SpecError: the spec cannot be read or resolved, a recorder matches no module (strict), or the
            spec has patches the model does not have applied yet (apply them with `patch_model`).
        KeyError: a key in `outputs` that the spec does not declare (the message lists the known keys).
        ValueError: `spec=None` on a model that declares no capture map.
        CaptureError: during the block, a recorder cannot take what it asks for (an index past a
            module's tuple output, token positions out of range).

    Hooks exist only inside the block, record only calls made in the context (thread) that entered it,
    and are removed even if the block raises. `model` may be the module `torch.compile` returned, or
    the original of a compiled module, before or after its first compiled call (see docs/capture.md).

    Example:
        >>> import torch, yamltrace
        >>> from yamltrace.examples.tiny import TinyConfig, TinyDecoderLayer, TinyModel
        >>> model = TinyModel(TinyConfig()).eval()
        >>> with torch.no_grad(), yamltrace.trace(model, {"hidden_states": TinyDecoderLayer}) as captures:
        ...     _ = model(torch.randint(0, 128, (1, 8)))
        >>> len(captures["hidden_states"])  # the embeddings, then one per layer (the last tied post-norm)
        5
    """
    # Steps are calls of `outer` (a DDP, FSDP or torch.compile wrapper, or the model); all else sees the model inside.
    outer, model = model, unwrap(model)
    scopes, explicit = _resolve(model, spec, strict)
    paths = [s.path for s in scopes]
    # A scope that records nothing (a decorated forward with an empty map: M2M100Model, GitForCausalLM)
    # only shadows; its forward returns its nested models' captures, so those are what the block yields.
    top = outermost([s.path for s in scopes if s.tasks])
    hooked: dict[str, set[str]] = {}
    for scope in scopes:
        if scope.path in top:
            scope.exposed = True
            nested = [p for p in paths if p != scope.path and is_under(p, scope.path)]
            scope.plan, hooked[scope.path] = _plan_scope(scope, nested)
    exposed = [s for s in scopes if s.exposed]
    keys_of = {s.path: list(dict.fromkeys(k for k, _ in s.tasks)) for s in exposed}
    shared = [key for key in dict.fromkeys(k for ks in hooked.values() for k in ks) if sum(key in ks for ks in hooked.values()) > 1]
    names = exposed_names(keys_of, hooked, plain_owners(model, list(hooked), shared) if shared else None)
    known = tuple(names.values())
    wanted = known if outputs is None else tuple(dict.fromkeys([outputs] if isinstance(outputs, str) else outputs))
    for name in wanted:
        if name not in known:
            raise KeyError(f"trace: output {name!r} is not in the spec (keys: {list(known)}){did_you_mean(name, known)}")
    if explicit is not None:
        # Every recorder is checked, or with `outputs` those of the chosen keys.
        def checked(path: str, key: str) -> bool:
            return outputs is None or names.get((path, key)) in wanted

        check_recorders(model, explicit, {s.path: s.module for s in scopes}, strict=strict, checked=checked)

    session = Session(Collector(()), block=True)
    stack = session.scopes
    lists: dict[str, list[Any]] = {}
    value_paths: dict[str, list[str]] = {}  # the module path of each value, beside `lists`
    sources: dict[str, tuple[_Scope, str]] = {}
    for scope in exposed:
        keys = [key for key in keys_of[scope.path] if (scope.path, key) in names and names[(scope.path, key)] in wanted]
        scope.plan = [
            (m, p, kept) for m, p, entries in scope.plan if (kept := tuple(e for e in entries if e[0] in keys))
        ]
        selections = resolve_selections(scope.tasks, keys, None, _position_counter(scope.module, scope.plan))
        scope.collector = Collector(keys, selections)
        for key in keys:
            lists[names[(scope.path, key)]] = scope.collector.lists[key]
            value_paths[names[(scope.path, key)]] = scope.collector.paths[key]
            sources[names[(scope.path, key)]] = (scope, key)
    lists = {name: lists[name] for name in wanted}
    value_paths = {name: value_paths[name] for name in wanted}
    ends: list[tuple[int, ...]] = []
    step_starts = {name: 0 for name in lists}
    captures = Captures(lists, ends, value_paths)
    is_active = session.recording
    ties: list[int] = []
    depth = 0

    # Steps are kept in place (no new containers inside the hooks, which torch.compile may trace):
    # a finished step moves `step_starts` to the lists' ends; an unfinished one is cut off.
    def discard_unfinished() -> None:
        for name, values in lists.items():
            start = step_starts[name]
            if len(values) > start:  # (the common case, a finished step, has nothing to cut)
                del values[start:]
                del value_paths[name][start:]
        del stack[:]
        del ties[:]

    # What a call does on entry and exit for each role its module has (the steps' module, a scope's
    # module, a tie point); `_frame` runs them behind one `is_active()` check per call.
    def step_entered() -> None:
        nonlocal depth
        if depth == 0:
            discard_unfinished()
        depth += 1

    def step_exited(output: Any, finished: bool) -> None:
        # A call that raised (not finished) ends its step without keeping it.
        nonlocal depth
        if depth == 0:
            return
        if finished and depth == 1:
            ends.append(tuple(map(len, lists.values())))
            for name, values in lists.items():
                step_starts[name] = len(values)
        depth -= 1
        if depth == 0:
            discard_unfinished()

    def scope_role(scope: _Scope) -> tuple[Callable[[], None], Callable[[Any, bool], None]]:
        number, collector = scope.number, scope.collector

        def scope_entered() -> None:
            stack.append(number)
            if collector is not None:  # a new call of the scope: positions count from here
                for key, values in collector.lists.items():
                    collector.starts[key] = len(values)

        def scope_exited(output: Any, finished: bool) -> None:
            if stack:
                stack.pop()

        return scope_entered, scope_exited

    def tie_role(values: list[Any], collector: Collector, tie: bool) -> tuple[Callable[[], None], Callable[[Any, bool], None]]:
        def tie_entered() -> None:
            ties.append(len(values))

        def tie_exited(output: Any, finished: bool) -> None:
            if ties:
                mark = ties.pop()
                if tie and output is not None and len(values) > mark:
                    tie_last_hidden_state(values, output, collector.last_transform.get("hidden_states"))

        return tie_entered, tie_exited

    # Roles by module: entries in the order added, exits in reverse.
    roles: dict[int, tuple[nn.Module, list[Callable[[], None]], list[Callable[[Any, bool], None]]]] = {}

    def add_role(module: nn.Module, entered: Callable[[], None], exited: Callable[[Any, bool], None]) -> None:
        _, entries, exits = roles.setdefault(id(module), (module, [], []))
        entries.append(entered)
        exits.insert(0, exited)

    add_role(outer, step_entered, step_exited)
    decorated = decorated_paths(model)
    for scope in scopes:
        add_role(scope.module, *scope_role(scope))
        collector = scope.collector
        if collector is not None and "hidden_states" in collector.lists:
            values = collector.lists["hidden_states"]
            for point in tie_points(scope.path, decorated, paths):
                module = model.get_submodule(point)
                tie = tie_last_enabled(getattr(module, "config", None), scope.options, decorator_tie_last(module))
                add_role(module, *tie_role(values, collector, tie))

    handles: list[Any] = []
    token = None
    try:
        for scope in exposed:
            if scope.plan and scope.collector is not None:
                handles.append(install_hooks(scope.plan, session.scope_gate(scope.number, scope.collector)))
        handles.append(intercept([], [(module, *_frame(is_active, entries, exits)) for module, entries, exits in roles.values()]))
        token = session.enter()
        yield captures
    finally:
        if token is not None:
            session.exit(token)
        session.open = False
        for handle in handles:
            handle.remove()
    # Keys whose modules ran and gave None where they read; a key with a layer selection holds None
    # for unselected layers on purpose.
    ran = {}
    for name, (scope, key) in sources.items():
        collector = scope.collector
        if collector is None or key == "hidden_states" or key in collector.selections:
            continue
        if any(p in collector.silent for _, p, entries in scope.plan if any(e[0] == key for e in entries)):
            ran[name] = lists[name]
    if ends:
        warn_no_tensor(model, ran)


def _frame(
    is_active: Callable[[], bool], entries: list[Callable[[], None]], exits: list[Callable[[Any, bool], None]]
) -> tuple[Callable[[], bool], Callable[[bool, Any, bool], None]]:
    """One module's frame (`_intercept`): its roles' entries and exits, for calls made while the block records."""

    def enter() -> bool:
        active = is_active()
        if active:
            for entered in entries:
                entered()
        return active

    def exit(active: bool, output: Any, finished: bool) -> None:
        if active:
            for exited in exits:
                exited(output, finished)

    return enter, exit
