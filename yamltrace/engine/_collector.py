"""What a capture records: the `Collector` of one session, and the listeners that feed it.

A hook is a listener on a module's forward (`_intercept`), cheaper than a torch forward hook; it
records only while its session says so (`_session`), which keeps threads and nested models apart.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from ..errors import CaptureError
from ._intercept import Interception, intercept
from ._recorder import OutputRecorder

__all__ = ["Collector", "Entry", "HookPlan", "Sessions", "Transform", "transform_of", "install_hooks"]

# What a recorder's `detach` / `to` / `dtype` do to a captured value; None when it asks for nothing.
Transform = Callable[[Any], Any]
# A plan entry: (key, tuple index, prepend the first input as the initial hidden state, transform).
Entry = tuple[str, int, bool, Transform | None]
# A plan: for each hooked module, its dotted path and its entries.
HookPlan = list[tuple[nn.Module, str, tuple[Entry, ...]]]


def transform_of(recorder: OutputRecorder) -> Transform | None:
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
                    raise CaptureError(
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


class Sessions:
    """The sessions hooks installed together serve: each call records into the first whose
    `recording()` is true (`_session.Session`, the single source of truth for what records).

    A `trace` block's hooks serve its one session; hooks a decorated model keeps between capturing
    forwards (`_held`) serve the forwards running now, one per thread, replaced as they start and end.
    """

    __slots__ = ("sessions",)

    def __init__(self, sessions: tuple[Any, ...] = ()) -> None:
        self.sessions = sessions


def install_hooks(plan: HookPlan, session: Any) -> Interception:
    """Intercept each planned module's forward, recording into `session.collector` while
    `session.recording()` says so (a `Session` of `_session`, or a `Sessions`); remove with `.remove()`.

    Interception (`_intercept`) rather than forward hooks: a capture installs its listeners for
    every capturing forward, and a listener costs less to install and to call than a hook.
    """
    served = session if isinstance(session, Sessions) else Sessions((session,))
    transformed = {entry[0] for _, _, entries in plan for entry in entries if entry[3] is not None}
    return intercept([(row[0], _listener(row, served, transformed), row) for row in plan])


def _listener(row: tuple[nn.Module, str, tuple[Entry, ...]], served: Sessions, transformed: set[str]) -> Any:
    """The listener of one planned module: a specialised one for the common case (one entry whose key
    no entry transforms), else the general `Collector.record`. Both fall back to `record` for a
    collector with selections, and for the error of an index out of range."""
    path, entries = row[1], row[2]

    def general(_: Any, args: tuple, kwargs: dict, output: Any) -> None:
        for session in served.sessions:
            if session.recording():
                session.collector.record(path, entries, args, kwargs, output)
                return

    if len(entries) != 1 or entries[0][0] in transformed:
        return general
    key, index, initial, _ = entries[0]

    # Closes over plain objects only (no bound built-in methods): dynamo guards on those by identity.
    def hidden_states(_: Any, args: tuple, kwargs: dict, output: Any) -> None:
        for session in served.sessions:
            if session.recording():
                break
        else:
            return
        collector = session.collector
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
        if initial and len(values) == collector.starts[key]:
            values.append(args[0] if args else next(iter(kwargs.values()), None))
        if value is not None:
            values.append(value)

    def other(_: Any, args: tuple, kwargs: dict, output: Any) -> None:
        for session in served.sessions:
            if session.recording():
                break
        else:
            return
        collector = session.collector
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
        else:
            values.append(output)

    return hidden_states if key == "hidden_states" else other
