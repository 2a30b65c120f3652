"""What a capture records and which collector records a call: `Collector`, its listener, their gate.

A hook is a listener on a module's forward, run by the module's torch forward hook (`_intercept`). It
asks its *gate* for the collector of the session that records the call, and that collector's one
`record` step records it: for hooks held by decorated forwards (`Sessions`), the innermost decorated
forward's session in the calling context; for a `trace` scope's (`ScopeGate`), the block's, while the
block is open in this context (`block_open`) and the scope is the innermost running.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextvars import ContextVar
from typing import Any, NamedTuple

import torch
from torch import nn
from torch.compiler import is_compiling, is_dynamo_compiling

from ..errors import CaptureError
from ._intercept import Interception, Listener
from .._recorder_fields import PADDING_POSITIONS
from ._padding import padding_selector
from ._positions import InputSource, PositionError, Transform, positions_selector
from .._recorder import OutputRecorder

__all__ = [
    "Collector", "Entry", "HookRow", "HookPlan", "ScopeGate", "Sessions", "Transform", "entry_of", "transform_of",
    "install_hooks", "hook_listeners", "block_open", "session_records", "innermost_forward", "open_blocks",
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


def transform_of(recorder: OutputRecorder) -> Transform | None:
    """What `recorder` does to a captured tensor (detach, keep positions, then move/cast); None when
    it keeps the reference. A transform that keeps positions says which, and by which mask argument:
    its `selects` is `(positions, mask)` (read by `_padding.plan_watch`)."""
    transform = _transform_of(recorder)
    if transform is not None and recorder.positions is not None:
        transform.selects = (recorder.positions, recorder.mask)  # type: ignore[attr-defined]
    return transform


def _transform_of(recorder: OutputRecorder) -> Transform | None:
    detach, device, dtype = recorder.detach, recorder.to, recorder.dtype
    convert = device is not None or dtype is not None
    if recorder.positions is None:
        if not detach and not convert:
            return None
        select = None
    elif recorder.positions in PADDING_POSITIONS:
        # Without a mask, every position counts: `last` is `[-1]`, `first` is `[0]`. Always a copy.
        literal = positions_selector((-1,) if recorder.positions == "last" else (0,), recorder.seq_dim)
        select = padding_selector(recorder.positions, recorder.seq_dim, recorder.mask, literal)
        if not detach and not convert:
            return select
    else:
        # The selection copies, unless `to`/`dtype` follow (they copy; a view is then enough).
        select = positions_selector(recorder.positions, recorder.seq_dim, copy=not convert)
        if not detach and not convert:
            return select  # passes non-tensors through: one call per captured value
    # A selection that may be a view must be copied when `to` does not copy.
    must_copy = select is not None and not select.copies  # type: ignore[attr-defined]

    def transform(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        if detach:
            value = value.detach()
        if select is not None:
            value = select(value)
        if convert:
            moved = value.to(device=device, dtype=dtype)
            if moved is not value:
                return moved
        return value.clone() if must_copy else value

    return transform


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


def block_open(session: Any) -> bool:
    """Whether a block session's block is open in the calling context; while dynamo traces, which
    cannot read a `ContextVar`, while it is open at all. The one home of this compile/eager branch:
    listeners, frames and edits all ask it."""
    # is_dynamo_compiling: one call, where is_compiling makes two.
    return session.open if is_dynamo_compiling() else session in open_blocks.get()


def session_records(session: Any) -> bool:
    """Whether hooks record into `session` (a `_session.Session`) for the current call: a forward
    session while it is the innermost decorated forward running in this context, a block session while
    its block is open in this context (`block_open`)."""
    if not session.block:
        return innermost_forward.get() is session
    return block_open(session)


class Sessions:
    """The gate of hooks held by a decorated model (`_held`): the capturing forwards of that model
    running now, one per thread, replaced as they start and end. A call records into the one of them
    that is the innermost decorated forward running in the calling context (`session_records`' rule
    for a forward session)."""

    __slots__ = ("sessions", "innermost")

    def __init__(self, innermost: Any, sessions: tuple[Any, ...] = ()) -> None:
        self.innermost = innermost  # a ContextVar: the innermost decorated forward's session
        self.sessions = sessions

    def collector(self) -> Collector | None:
        """The collector this call records into, or None."""
        held = self.sessions
        if not held:  # (first: dynamo may trace this, and cannot read the ContextVar)
            return None
        session = self.innermost.get()
        return session.collector if session in held else None


class ScopeGate:
    """The gate of one `trace` scope's hooks: they record into `recording` while the block's `session`
    is open in this context (`block_open`) and scope number `number` is the innermost of the block's
    `scopes` running now (a nested scope shadows its parent)."""

    __slots__ = ("recording", "session", "scopes", "number")

    def __init__(self, collector: Collector, session: Any, scopes: list[int], number: int) -> None:
        self.recording, self.session, self.scopes, self.number = collector, session, scopes, number

    def collector(self) -> Collector | None:
        """The collector this call records into, or None."""
        scopes = self.scopes
        if scopes and scopes[-1] == self.number and block_open(self.session):
            return self.recording
        return None


def install_hooks(plan: HookPlan, served: Sessions | ScopeGate, into: Interception) -> None:
    """Hook each planned module's forward, recording into the collector `served` gives the call
    (module docstring), owned by `into`."""
    into.add(hook_listeners(plan, served))


def hook_listeners(plan: HookPlan, served: Sessions | ScopeGate) -> list[tuple[nn.Module, Listener, HookRow]]:
    """What `install_hooks` installs, `(module, listener, row)` per planned module: listeners on the
    module's interceptor (`_intercept`), run by its torch forward hook."""
    return [(row[0], _listener(row[1], row[2], served), row) for row in plan]


def _listener(path: str, entries: tuple[Entry, ...], served: Sessions | ScopeGate) -> Listener:
    """The listener of one planned module: the gate's collector, if any, records the call."""

    def listener(_: Any, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        collector = served.collector()
        if collector is not None:
            collector.record(path, entries, args, kwargs, output)

    return listener
