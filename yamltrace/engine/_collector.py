"""What a capture records and which collector records a call: `Collector`, its listeners, their gate.

A hook is a listener on a module's forward, run by the module's torch forward hook (`_intercept`). It
records only into the collector of the session that records the call (the *gate*): for hooks held
by decorated forwards (`Sessions`), the innermost decorated forward's session in the calling
context; for a `trace` scope's (`ScopeGate`), the block's, while the block is open in this context
and the scope is the innermost running. The rule is `session_records`; the listeners write it out
inline (no Python call per hooked call but dynamo's test), and each copy, of the gate and of what
`Collector.record` keeps, is run against the rule by tests/unit/engine/test_listeners.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextvars import ContextVar
from typing import Any, NamedTuple

from torch import nn
from torch.compiler import is_compiling, is_dynamo_compiling

from ..errors import CaptureError
from ._intercept import Interception, Listener
from ._positions import InputSource, PositionError, Transform, transform_of
from ._recorder import OutputRecorder

__all__ = [
    "Collector", "Entry", "HookRow", "HookPlan", "ScopeGate", "Sessions", "Transform", "entry_of", "transform_of",
    "install_hooks", "hook_listeners", "session_records", "innermost_forward", "open_blocks",
]  # fmt: skip

# The kinds of entry (`Entry.kind`); each but TRANSFORMED and INPUT has its own listener.
HIDDEN, OTHER, SELECTED, TRANSFORMED, INPUT = "hidden_states", "other", "selected", "transformed", "input"


class Entry(NamedTuple):
    """What a hooked module's listener records for one key: `source`, the tuple index (or the
    `InputSource` of an input recorder); `initial`, prepend the first input as the initial hidden
    state; `transform`, what is done to a kept value (None: the reference is kept)."""

    key: str
    source: int | InputSource
    initial: bool
    transform: Transform | None

    @property
    def kind(self) -> str:
        """How the value is taken: INPUT, SELECTED (a transform that only keeps positions),
        TRANSFORMED, else HIDDEN or OTHER by key (the plain reference kept)."""
        if not isinstance(self.source, int):
            return INPUT
        if self.transform is not None:
            return SELECTED if hasattr(self.transform, "copies") else TRANSFORMED
        return HIDDEN if self.key == "hidden_states" else OTHER


class HookRow(NamedTuple):
    """One hooked module of a plan: the module, its dotted path (leading dot), its entries."""

    module: nn.Module
    path: str
    entries: tuple[Entry, ...]


HookPlan = list[HookRow]  # a plan: each hooked module's row


def entry_of(key: str, recorder: OutputRecorder) -> Entry:
    """The plan entry of one task: what a hooked module's listener records for `key`."""
    source = recorder.index if recorder.input is None else InputSource(recorder.input, recorder.target_class)
    return Entry(key, source, recorder.capture_initial_hidden_state, transform_of(recorder))


class Collector:
    """What one capture session has recorded so far: a list per requested key. `selections` maps a key to the positions to keep; other positions are recorded as `None`, so no
    tensor is retained for them. A kept value goes through its entry's transform, if any; without one
    the list holds the module's own object. `starts` says where the current forward's values begin
    in each list (a trace keeps every forward's values in one list); positions count from there.
    `paths` holds, beside each list, the dotted path (leading dot) of the module each value came
    from; the initial hidden state, which is the input of the first hooked module, has `:input` added.
    `silent` holds the paths of modules that gave `None` where a key other than `hidden_states`
    reads (attention weights under SDPA), so a trace can say why such a key is empty.
    """

    __slots__ = ("lists", "paths", "selections", "starts", "last_transform", "silent")

    def __init__(self, keys: Iterable[str], selections: dict[str, frozenset[int]] | None = None) -> None:
        lists: dict[str, list[Any]] = {}  # (loops, not comprehensions: one collector per capturing forward)
        paths: dict[str, list[str]] = {}
        for key in keys:
            lists[key] = []
            paths[key] = []
        self.lists, self.paths = lists, paths
        self.selections = selections or {}
        self.starts: dict[str, int] = dict.fromkeys(lists, 0)
        # The transform of each key's latest kept value, for a value replacing it (the tied last hidden state).
        self.last_transform: dict[str, Transform | None] = {}
        self.silent: set[str] = set()

    def begin_call(self) -> None:
        """A new call of the module this collector records for starts: positions count from here."""
        for key, values in self.lists.items():
            self.starts[key] = len(values)

    def _append(self, key: str, values: list[Any], value: Any, transform: Transform | None, path: str) -> None:
        selection = self.selections.get(key) if self.selections else None
        if selection is not None and len(values) - self.starts[key] not in selection:
            values.append(None)
        elif transform is None:
            values.append(value)
            if key == "hidden_states":
                self.last_transform[key] = None
        else:
            try:
                values.append(transform(value))
            except PositionError as e:
                raise CaptureError(f"yamltrace: output {key!r}, module {path.lstrip('.') or '<root>'}: {e}") from None
            self.last_transform[key] = transform
        self.paths[key].append(path)

    def record(self, path: str, entries: tuple[Entry, ...], args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        """Record `output` (and, for the first hidden state, the module's input) for each entry."""
        lists = self.lists
        is_tuple = isinstance(output, tuple)
        for key, index, initial, transform in entries:
            values = lists.get(key)
            if values is None:
                continue
            if not isinstance(index, int):  # an InputSource: the recorder takes an argument
                try:
                    value = index.take(path, args, kwargs)
                except PositionError as e:
                    raise CaptureError(f"yamltrace: output {key!r}: {e}") from None
                self._append(key, values, value, transform, path)
                continue
            if not is_tuple:
                value = output
            else:
                try:
                    value = output[index]
                except IndexError:
                    raise CaptureError(
                        f"yamltrace: output {key!r} records element {index} of the output of module {path or '<root>'}, "
                        f"which returned a tuple of {len(output)}. Fix the recorder's index."
                    ) from None
            if key == "hidden_states":
                if initial and len(values) == self.starts[key]:
                    first_input = args[0] if args else next(iter(kwargs.values()), None)
                    self._append(key, values, first_input, transform, path + ":input")
                if value is not None:
                    self._append(key, values, value, transform, path)
            else:
                if value is None and not is_compiling():  # (dynamo would guard on the set's add)
                    self.silent.add(path)
                if value is not None or not is_tuple:
                    # A None element of a tuple is skipped; a module that returned None itself is kept.
                    self._append(key, values, value, transform, path)


# The session of the innermost decorated forward running in this context, and the trace blocks open in it.
innermost_forward: ContextVar[Any] = ContextVar("yamltrace_innermost_forward", default=None)
open_blocks: ContextVar[tuple[Any, ...]] = ContextVar("yamltrace_open_blocks", default=())


def session_records(session: Any) -> bool:
    """Whether hooks record into `session` (a `_session.Session`) for the current call: a forward
    session while it is the innermost decorated forward running in this context, a block session while
    its block is open in this context (while dynamo traces, which cannot read a `ContextVar`: while it
    is open, from any thread)."""
    if not session.block:
        return innermost_forward.get() is session
    # is_dynamo_compiling: one call, where is_compiling makes two.
    return session.open if is_dynamo_compiling() else session in open_blocks.get()


class Sessions:
    """The decorated forwards' sessions hooks installed together serve (`_held`: the capturing forwards
    of one model running now, one per thread, replaced as they start and end).

    A call records into the one of them that is the innermost decorated forward running in the
    calling context: the value of `innermost` (`innermost_forward`), by `session_records`' rule for
    a forward session. The listeners test it inline.
    """

    __slots__ = ("sessions", "innermost")

    def __init__(self, innermost: Any, sessions: tuple[Any, ...] = ()) -> None:
        self.innermost = innermost  # a ContextVar: the innermost decorated forward's session
        self.sessions = sessions


class ScopeGate:
    """What the hooks of one `trace` scope record into, and when: `collector`, while the block's
    `session` records in this context (`session_records`: it is in `blocks`, the open blocks) and
    scope number `number` is the innermost of the block's `scopes` running now (a nested scope
    shadows its parent). The listeners read these fields and test them inline.
    """

    __slots__ = ("collector", "session", "scopes", "number", "blocks")

    def __init__(self, collector: Collector, session: Any, scopes: list[int], number: int) -> None:
        self.collector, self.session, self.scopes, self.number, self.blocks = collector, session, scopes, number, open_blocks


def install_hooks(plan: HookPlan, served: Sessions | ScopeGate, into: Interception) -> None:
    """Hook each planned module's forward, recording into the collector `served` gives the call
    (module docstring), owned by `into`."""
    into.add(hook_listeners(plan, served))


def hook_listeners(plan: HookPlan, served: Sessions | ScopeGate) -> list[tuple[nn.Module, Listener, HookRow]]:
    """What `install_hooks` installs, `(module, listener, row)` per planned module: listeners on the
    module's interceptor (`_intercept`), run by its torch forward hook."""
    transformed = {entry.key for _, _, entries in plan for entry in entries if entry.transform is not None}
    parts = _gate_parts(served)
    return [(row[0], _listener(row, parts, transformed), row) for row in plan]


def _listener(row: tuple[nn.Module, str, tuple[Entry, ...]], parts: GateParts, transformed: set[str]) -> Any:
    """The listener of one planned module, by its entries' kinds: a specialised one for one entry
    that only keeps positions (SELECTED), or that keeps the reference (HIDDEN, OTHER) for a key no
    entry transforms; else the general `Collector.record`. The specialised ones fall back to `record`
    for a collector with selections, and for the error of an index out of range.

    Each listener first finds the collector of the call, if any (the gate, written out in each: see
    the module docstring). One factory per kind, each defining only its own closure: a capture that
    installs builds one listener per hooked module.
    """
    path, entries = row[1], row[2]
    if len(entries) == 1:
        kind = entries[0].kind
        if kind == SELECTED:
            return _selection_listener(path, entries, parts)
        if kind == HIDDEN and entries[0].key not in transformed:
            return _hidden_states_listener(path, entries, parts)
        if kind == OTHER and entries[0].key not in transformed:
            return _other_listener(path, entries, parts)
    # Several entries, a transform (detach, to, dtype), or an input recorder.
    return _general_listener(path, entries, parts)


def _general_listener(path: str, entries: tuple[Entry, ...], parts: GateParts) -> Any:
    """A listener that records through `Collector.record`."""
    gate, sessions, innermost, scopes, number, block, blocks, gated = parts

    def general(_: Any, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        if gate is None:
            held = sessions.sessions
            if held and (session := innermost.get()) in held:  # (`held` first: see `hidden_states`)
                session.collector.record(path, entries, args, kwargs, output)
        elif scopes and scopes[-1] == number and (block.open if is_dynamo_compiling() else block in blocks.get()):
            gated.record(path, entries, args, kwargs, output)

    return general


def _hidden_states_listener(path: str, entries: tuple[Entry, ...], parts: GateParts) -> Any:
    """A listener for one `hidden_states` entry without a transform: append the value (and, first,
    the module's input as the initial hidden state)."""
    gate, sessions, innermost, scopes, number, block, blocks, gated = parts
    key, source, initial, _ = entries[0]
    index: int = source  # type: ignore[assignment]  # (an int here: input recorders take the general listener)
    input_path = path + ":input"

    # Closes over plain objects only (no bound built-in methods): dynamo guards on those by identity.
    def hidden_states(_: Any, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        if gate is None:
            # No capturing forward running (dynamo may trace this: it cannot read the ContextVar).
            held = sessions.sessions
            if not held:
                return
            session = innermost.get()
            if session not in held:
                return
            collector = session.collector
        elif scopes and scopes[-1] == number and (block.open if is_dynamo_compiling() else block in blocks.get()):
            collector = gated
        else:
            return
        values = collector.lists.get(key)
        if values is None:
            return
        if collector.selections:
            collector.record(path, entries, args, kwargs, output)
            return
        if isinstance(output, tuple):
            try:
                value = output[index]
            except IndexError:
                collector.record(path, entries, args, kwargs, output)  # raises the located error
                return
        else:
            value = output
        paths = collector.paths[key]
        if initial and len(values) == collector.starts[key]:
            values.append(args[0] if args else next(iter(kwargs.values()), None))
            paths.append(input_path)
        if value is not None:
            values.append(value)
            paths.append(path)

    return hidden_states


def _other_listener(path: str, entries: tuple[Entry, ...], parts: GateParts) -> Any:
    """A listener for one entry of another key without a transform: append the value, or note a
    module that gave `None` (`Collector.silent`)."""
    gate, sessions, innermost, scopes, number, block, blocks, gated = parts
    key, source, _, _ = entries[0]
    index: int = source  # type: ignore[assignment]  # (an int: input recorders take the general listener)

    def other(_: Any, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        if gate is None:
            held = sessions.sessions
            if not held:
                return
            session = innermost.get()
            if session not in held:
                return
            collector = session.collector
        elif scopes and scopes[-1] == number and (block.open if is_dynamo_compiling() else block in blocks.get()):
            collector = gated
        else:
            return
        values = collector.lists.get(key)
        if values is None:
            return
        if collector.selections:
            collector.record(path, entries, args, kwargs, output)
        elif isinstance(output, tuple):
            try:
                value = output[index]
            except IndexError:
                collector.record(path, entries, args, kwargs, output)  # raises the located error
                return
            if value is not None:
                values.append(value)
                collector.paths[key].append(path)
            elif not is_compiling():
                collector.silent.add(path)
        else:
            values.append(output)
            collector.paths[key].append(path)
            if output is None and not is_compiling():
                collector.silent.add(path)

    return other


# What a listener closes over to find its call's collector (`_gate_parts`).
GateParts = tuple[Any, ...]


def _gate_parts(served: Sessions | ScopeGate) -> GateParts:
    """What a listener closes over to find its call's collector: (the gate or None, the sessions and
    the innermost forward's context, then the gate's scopes, number, session, open blocks and
    collector; placeholders for what the other kind has)."""
    if isinstance(served, ScopeGate):
        return served, None, None, served.scopes, served.number, served.session, served.blocks, served.collector
    return None, served, served.innermost, [], 0, None, None, None


def _selection_listener(path: str, entries: tuple[Entry, ...], parts: GateParts) -> Any:
    """The listener of a module whose one recorder only keeps positions (its transform is the
    selector `transform_of` returned): select, append, and note the transform for the tied last
    hidden state, as `Collector.record` would. Everything else goes to `record` before anything is
    appended: a collector with `layers` selections, the initial hidden state, a `None` element, an
    index out of range, and a selection that does not fit (which `record` raises, located)."""
    key, source, initial, transform = entries[0]
    index: int = source  # type: ignore[assignment]  # (an int: input recorders take the general listener)
    select: Transform = transform  # type: ignore[assignment]  # (a selector: `kind` is SELECTED)
    initial = initial and key == "hidden_states"
    gate, sessions, innermost, scopes, number, block, blocks, gated = parts

    def selected(_: Any, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        if gate is None:
            held = sessions.sessions
            if not held:
                return
            session = innermost.get()
            if session not in held:
                return
            collector = session.collector
        elif scopes and scopes[-1] == number and (block.open if is_dynamo_compiling() else block in blocks.get()):
            collector = gated
        else:
            return
        values = collector.lists.get(key)
        if values is None:
            return
        if not collector.selections and not (initial and len(values) == collector.starts[key]):
            value = output
            if isinstance(output, tuple):
                value = output[index] if -len(output) <= index < len(output) else None
            if value is not None:
                try:
                    kept = select(value)
                except PositionError:
                    pass
                else:
                    values.append(kept)
                    collector.paths[key].append(path)
                    collector.last_transform[key] = select
                    return
        collector.record(path, entries, args, kwargs, output)

    return selected
