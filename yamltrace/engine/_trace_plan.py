"""The plan of a `trace` block: its scopes, what it hooks, records and ties, decided before anything
is installed.

Scopes follow transformers' decorated forwards: a base model's `capture_outputs` forward opens its own
collector, the modules it runs record into it, a nested one shadows it, and the last hidden state is
tied at its exit with that model's own setting. A *scope* is such a submodule, named by its dotted
path ("" for the root); the outermost scopes that record are *exposed*, their keys named by
`exposed_names`; nested scopes only shadow them; hidden states tie at each scope's tie points
(`tie_points`).

`plan_trace` reads the model and the block's resolved scopes (`Scope`: from a spec, or from the
model's decorated forwards) and changes nothing: no hook, no collector, no recording state, which
are the run's (`_trace_run`). So a plan can be checked without a forward, and a later block on the
same model and spec reuses it while the model is unchanged (`_plans`) and nothing it read from a
config would be read differently (`stale`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple

from torch import nn

from ..errors import CaptureError, did_you_mean
from ._collector import HookRow
from ._plan import ModelIndex, plan_hooks
from .._recorder import OutputRecorder
from ._positions import position_counter, resolve_selections
from ._session import decorator_tie_last, tie_last_enabled
import weakref
from ._plan import own_output_map
from .._recorder import normalized_tasks

__all__ = [
    "Scope",
    "ScopePlan",
    "Tie",
    "TraceOutput",
    "TracePlan",
    "ConfigReads",
    "config_reads",
    "plan_trace",
    "stale",
    "decorated_paths",
    "is_under",
    "outermost",
    "tie_points",
    "exposed_names",
    "plain_owners",
    "scope_label",
    "scope_modules",
]


class Scope(NamedTuple):
    """One capture scope of a trace, as resolved: its number (its position among the block's scopes),
    dotted path ("" for the root), module, tasks (key, recorder), whether nested models follow their
    own maps, and its options (`tie_last_hidden_states`)."""

    number: int
    path: str
    module: nn.Module
    tasks: tuple[tuple[str, OutputRecorder], ...]
    nested_maps: bool
    options: Mapping[str, Any]


class Tie(NamedTuple):
    """A module at whose exit a scope ties its last hidden state, and whether it ties (tie-last rule)."""

    module: nn.Module
    enabled: bool


class ScopePlan(NamedTuple):
    """What one scope does in a block. Every scope marks its calls (it shadows its parent); an exposed
    one also records `keys` through `hooks` (paths from the traced model) into its own collector,
    keeping `selections`, and ties its hidden states at `ties`."""

    number: int
    path: str
    module: nn.Module
    exposed: bool
    keys: tuple[str, ...]
    hooks: tuple[HookRow, ...]
    selections: Mapping[str, frozenset[int]]
    ties: tuple[Tie, ...]


class TraceOutput(NamedTuple):
    """One key the block yields: its name, and the scope (number) and key it is recorded under."""

    name: str
    scope: int
    key: str


class TracePlan(NamedTuple):
    """A block's plan: its scopes (in the order resolved), the outputs it yields (in the order asked),
    the name of every exposed (scope path, key), asked for or not, and the paths of the modules each
    output hooks (in `outputs`' order: what the end-of-block checks of a run compare)."""

    scopes: tuple[ScopePlan, ...]
    outputs: tuple[TraceOutput, ...]
    names: Mapping[tuple[str, str], str]
    modules: tuple[tuple[str, ...], ...]


def plan_trace(
    model: nn.Module, scopes: Sequence[Scope], outputs: str | Iterable[str] | None, index: ModelIndex | None = None
) -> TracePlan:
    """The plan of a block recording `scopes` of `model`, limited to the keys `outputs` names (all by
    default); KeyError, listing the known keys, for a name the scopes do not expose. `index`: the
    model's walk, if the caller has it."""
    paths = [s.path for s in scopes]
    top = outermost([s.path for s in scopes if s.tasks])
    rows = {s.path: _scope_rows(s, [p for p in paths if p != s.path and is_under(p, s.path)]) for s in scopes if s.path in top}
    hooked = {path: {entry.key for row in found for entry in row.entries} for path, found in rows.items()}
    keys_of = {s.path: list(dict.fromkeys(k for k, _ in s.tasks)) for s in scopes if s.path in rows}
    shared = [
        key for key in dict.fromkeys(k for ks in hooked.values() for k in ks) if sum(key in ks for ks in hooked.values()) > 1
    ]
    names = exposed_names(keys_of, hooked, plain_owners(model, list(hooked), shared) if shared else None)
    wanted = _wanted(names, outputs)
    decorated = decorated_paths(model, index)
    planned = []
    for scope in scopes:
        if scope.path not in rows:
            planned.append(ScopePlan(scope.number, scope.path, scope.module, False, (), (), {}, ()))
            continue
        keys = tuple(key for key in keys_of[scope.path] if names.get((scope.path, key)) in wanted)
        ties = _ties(model, scope, decorated, paths) if "hidden_states" in keys else ()
        planned.append(_exposed(scope, rows[scope.path], keys, ties))
    by_name = {names[(s.path, key)]: TraceOutput(names[(s.path, key)], s.number, key) for s in planned for key in s.keys}
    chosen = tuple(by_name[name] for name in wanted)
    hooks = {s.number: s.hooks for s in planned}
    modules = tuple(tuple(r.path for r in hooks[o.scope] if any(e.key == o.key for e in r.entries)) for o in chosen)
    return TracePlan(tuple(planned), chosen, MappingProxyType(names), modules)


class ConfigReads(NamedTuple):
    """What a plan read from configs (`config_reads`): each tie point with its scope's options, the
    setting read, its class's forward and that forward's decorator argument; each scope that selects
    layers with what it selected."""

    ties: tuple[tuple[nn.Module, Mapping[str, Any], bool, Any, bool | None], ...]
    selections: tuple[tuple[Scope, ScopePlan], ...]


def config_reads(plan: TracePlan, scopes: Sequence[Scope]) -> ConfigReads:
    """What `stale` reads again: the tie-last setting of each tie point, the layers of each exposed
    scope whose recorders select layers (negative ones count from the config's layer count)."""
    by_number = {scope.number: scope for scope in scopes}
    exposed = [(by_number[p.number], p) for p in plan.scopes if p.exposed]
    ties = tuple(
        (tie.module, scope.options, tie.enabled, _forward(tie.module), decorator_tie_last(tie.module))
        for scope, planned in exposed
        for tie in planned.ties
    )
    selecting = tuple((scope, planned) for scope, planned in exposed if any(r.layers is not None for _, r in scope.tasks))
    return ConfigReads(ties, selecting)


def stale(reads: ConfigReads) -> bool:
    """Whether what a plan read from configs (`config_reads`) would be read differently now: a kept
    plan is then planned again."""
    for module, options, enabled, forward, decorated in reads.ties:
        if _forward(module) is not forward:  # (the decorator's argument read again only for a new forward)
            decorated = decorator_tie_last(module)
        if tie_last_enabled(getattr(module, "config", None), options, decorated) != enabled:
            return True
    for scope, planned in reads.selections:
        if _selections(scope, planned.keys, planned.hooks) != planned.selections:
            return True
    return False


def _scope_rows(scope: Scope, nested: list[str]) -> list[HookRow]:
    """The hooks of an exposed scope (none inside a nested scope), with paths from the traced model."""
    rows = []
    for module, path, entries in plan_hooks(scope.module, scope.tasks, nested_maps=scope.nested_maps):
        full = f"{scope.path}{path}" if scope.path else path[1:]
        if not any(is_under(full, n) for n in nested):
            rows.append(HookRow(module, f".{full}" if full else "", entries))
    return rows


def _wanted(names: Mapping[tuple[str, str], str], outputs: str | Iterable[str] | None) -> tuple[str, ...]:
    """The names a block yields: every exposed name, or those `outputs` asks for (KeyError for others)."""
    known = tuple(names.values())
    wanted = known if outputs is None else tuple(dict.fromkeys([outputs] if isinstance(outputs, str) else outputs))
    for name in wanted:
        if name not in known:
            raise KeyError(f"trace: output {name!r} is not in the spec (keys: {list(known)}){did_you_mean(name, known)}")
    return wanted


def _exposed(scope: Scope, rows: list[HookRow], keys: tuple[str, ...], ties: tuple[Tie, ...]) -> ScopePlan:
    """An exposed scope's plan: its hooks kept for `keys` only, and the layers each key keeps."""
    kept = []
    for row in rows:
        entries = tuple(entry for entry in row.entries if entry.key in keys)
        if entries:
            kept.append(HookRow(row.module, row.path, entries))
    hooks = tuple(kept)
    return ScopePlan(scope.number, scope.path, scope.module, True, keys, hooks, _selections(scope, keys, hooks), ties)


def _selections(scope: Scope, keys: tuple[str, ...], hooks: Sequence[HookRow]) -> Mapping[str, frozenset[int]]:
    """The layers each key of an exposed scope keeps (negative `layers` count from the config's
    layer count, else from the modules hooked for the key); empty when no recorder selects layers."""
    if all(recorder.layers is None for _, recorder in scope.tasks):
        return MappingProxyType({})
    hooked = {key: sum(1 for row in hooks if any(entry.key == key for entry in row.entries)) for key in keys}
    counter = position_counter(getattr(scope.module, "config", None), hooked)
    for key, recorder in scope.tasks:
        total = counter(key, recorder) if key in keys and recorder.layers is not None else None
        if total is None:
            continue
        outside = [i for i in recorder.layers or () if not -total <= i < total]
        if outside:
            where = f"scope {scope.path!r}, " if scope.path else ""
            raise CaptureError(
                f"yamltrace: {where}output {key!r}: layers {outside} out of range: the model has {total} position(s) "
                f"for {key!r} (valid indices {-total}..{total - 1}). Fix the recorder's `layers`."
            )
    return MappingProxyType(resolve_selections(scope.tasks, keys, None, counter))


def _ties(model: nn.Module, scope: Scope, decorated: list[str], paths: list[str]) -> tuple[Tie, ...]:
    """Where a scope recording hidden states ties the last one, each with its own tie-last setting."""
    points = tie_points(scope.path, decorated, paths)
    return tuple(Tie(module, _tie_enabled(module, scope.options)) for module in map(model.get_submodule, points))


def _tie_enabled(module: nn.Module, options: Mapping[str, Any]) -> bool:
    """Whether a scope with `options` ties its last hidden state at `module` (the tie-last rule)."""
    return tie_last_enabled(getattr(module, "config", None), options, decorator_tie_last(module))


def _forward(module: nn.Module) -> Any:
    return getattr(type(module), "forward", None)


def decorated_paths(model: nn.Module, index: ModelIndex | None = None) -> list[str]:
    """Dotted paths ("" for the root) of the modules whose forward carries a capture decorator
    (yamltrace's or transformers' `capture_outputs`), in `named_modules` order (`index`: the model's
    walk, if the caller has it)."""
    named = model.named_modules() if index is None else index.named()
    return [path for path, module in named if _is_decorated(type(module))]


def _is_decorated(cls: type) -> bool:
    """Whether the class's forward carries a capture decorator (memoised per class: a class's forward
    is not expected to change; a class whose forward an instance overrides is read from the class)."""
    decorated = _DECORATED.get(cls)
    if decorated is None:
        decorated = _DECORATED[cls] = decorator_tie_last(cls) is not None
    return decorated


_DECORATED: weakref.WeakKeyDictionary[type, bool] = weakref.WeakKeyDictionary()


def is_under(path: str, scope: str) -> bool:
    """Whether the module at `path` is `scope` or lies in its subtree."""
    return scope == "" or path == scope or path.startswith(scope + ".")


def outermost(paths: Iterable[str]) -> list[str]:
    """The paths that lie in no other path's subtree, in the given order."""
    paths = list(paths)
    return [p for p in paths if not any(q != p and is_under(p, q) for q in paths)]


def tie_points(scope: str, decorated: Sequence[str], scopes: Sequence[str]) -> list[str]:
    """Where a scope ties its last hidden state: the decorated modules of its subtree that are not
    inside a nested scope, else the scope module itself."""
    nested = [s for s in scopes if s != scope and is_under(s, scope)]
    points = [p for p in decorated if is_under(p, scope) and not any(is_under(p, s) for s in nested)]
    return points or [scope]


def scope_label(path: str, others: Iterable[str]) -> str:
    """The prefix a scope's keys get when several scopes record one key: the last component of its
    path (`encoder`), or the whole path with `_` for dots when that last component is not unique."""
    last = path.rpartition(".")[2]
    if sum(1 for other in others if other.rpartition(".")[2] == last) > 1:
        return path.replace(".", "_")
    return last


def plain_owners(model: nn.Module, scopes: Sequence[str], keys: Iterable[str]) -> dict[str, str]:
    """For each of `keys`, the one of several outermost `scopes` whose captures are the model's own.

    A composite's forward returns one part's captures under the plain key (a multimodal model's
    `hidden_states` are its language model's, not its vision tower's), as transformers' model outputs
    do. That part is, per key:
    1. the one scope holding modules that the traced model's own non-empty map hooks for the key (a
       Gemma3 or Mllama composite declares its language model's layer classes); else
    2. the one scope named `language_model`, transformers' convention for the language model of a
       multimodal composite (Llava, PaliGemma, Qwen2-VL and their kin declare no map of their own).
    A key left out (the map hooks several scopes or none, and no single `language_model`: an
    encoder-decoder, a dual encoder such as CLIP) is prefixed in every scope.
    """
    found: dict[str, set[str]] = {}
    own = own_output_map(model)
    if isinstance(own, Mapping) and own:
        for _, path, entries in plan_hooks(model, normalized_tasks(own), nested_maps=False):
            holders = {scope for scope in scopes if is_under(path[1:], scope)}
            for entry in entries:
                found.setdefault(entry.key, set()).update(holders)
    language = [scope for scope in scopes if scope.rpartition(".")[2] == "language_model"]
    owners = {}
    for key in keys:
        holders = found.get(key, set())
        if len(holders) == 1:
            owners[key] = next(iter(holders))
        elif len(language) == 1:
            owners[key] = language[0]
    return owners


def exposed_names(
    keys: Mapping[str, Sequence[str]], hooked: Mapping[str, set[str]], owners: Mapping[str, str] | None = None
) -> dict[tuple[str, str], str]:
    """The name each (scope, key) is exposed under, for the outermost scopes of a trace.

    `keys` maps each scope path to its output keys, `hooked` each scope path to the keys whose
    recorders hook at least one of its modules. A key of one scope keeps its name; a key several
    scopes declare keeps it for the one scope that hooks modules for it (the encoder of an
    encoder-decoder has no cross-attention modules: the decoder's are `cross_attentions`); a key
    several scopes hook keeps it for its owner in `owners` (see `plain_owners`) and is
    `<label>_<key>` for each other scope, or for each scope when it has no owner among them
    (`encoder_hidden_states`, `decoder_hidden_states`, as transformers names them in a
    sequence-to-sequence output). Keys no scope hooks are named after the first scope that declares them.
    """
    paths = list(keys)
    names: dict[tuple[str, str], str] = {}
    for key in dict.fromkeys(k for path in paths for k in keys[path]):
        declaring = [path for path in paths if key in keys[path]]
        hooking = [path for path in declaring if key in hooked.get(path, ())]
        if len(hooking) > 1:
            owner = (owners or {}).get(key)
            for path in hooking:
                names[(path, key)] = key if path == owner else f"{scope_label(path, paths)}_{key}"
        else:
            names[((hooking or declaring)[0], key)] = key
    return names


def scope_modules(
    model: nn.Module, scope: str, nested: Iterable[str], index: ModelIndex | None = None
) -> list[tuple[str, nn.Module]]:
    """(path relative to the scope module with a leading dot, module) of a scope's subtree, nested
    scopes and wrappers (`_wrappers`) left out: the paths a recorder's `matches` sees. `index`: the
    model's walk, if the caller has it (else the model is walked)."""
    index = ModelIndex(model) if index is None else index
    nested = [n for n in nested if n != scope and is_under(n, scope)]
    found = []
    for raw, path, child in index.subtree(scope):
        full = f"{scope}.{raw}" if scope and raw else (raw or scope)
        if not any(is_under(full, n) for n in nested):
            found.append((f".{path}" if path else "", child))
    return found
