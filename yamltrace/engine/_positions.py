"""Input capture and token-position selection: what a recorder takes besides an output element, and
the selection it keeps of it (a recorder's whole transform is `_collector.transform_of`).

`InputSource` says which argument of a module's forward a recorder records (`OutputRecorder.input`);
`positions_selector` builds the function that keeps only some token positions of a captured tensor
(`OutputRecorder.positions` along `OutputRecorder.seq_dim`), so the positions left out are never
retained: a selection is a tensor with its own, smaller storage, never a view of the module's.

Which layers each captured key keeps (`resolve_selections`, `position_counter`): the indices of
`output_hidden_states=[...]` and a recorder's `layers`, negative ones counted from the config's layer
count or the modules hooked.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch

from .._recorder import OutputRecorder
from ..errors import PositionError

__all__ = [
    "InputSource",
    "PositionError",
    "Transform",
    "positions_index",
    "positions_selector",
    "position_counter",
    "requested_positions",
    "resolve_positions",
    "resolve_selections",
]

# What a recorder's `positions` / `detach` / `to` / `dtype` do to a captured value; None when it asks for nothing.
Transform = Callable[[Any], Any]


def _as_index(positions: tuple[int, ...] | str) -> slice | list[int]:
    """The index along the sequence dimension: a slice for a slice text or a single position, else a list."""
    if isinstance(positions, str):
        parts = [int(p) if p else None for p in positions.split(":")]
        return slice(*parts)
    if len(positions) == 1:
        (i,) = positions
        return slice(i, None if i == -1 else i + 1)
    return list(positions)


def positions_index(positions: tuple[int, ...] | str, length: int) -> list[int]:
    """The positions `positions` picks in a sequence of `length`, made absolute, with the selection's
    semantics (a slice is clipped, as Python's; a listed position out of range is a `PositionError`,
    as is a selection of nothing)."""
    index = _as_index(positions)
    written = positions if isinstance(positions, str) else list(positions)
    try:
        picked = list(range(length)[index]) if isinstance(index, slice) else [range(length)[i] for i in index]
    except IndexError:
        picked = []
    if not picked:
        problem = "select nothing from" if isinstance(positions, str) else "are out of range for"
        raise PositionError(f"positions {written!r} {problem} a sequence of {length}.")
    return picked


def _fixed_span(index: slice) -> tuple[int, int] | None:
    """`(start, length)` of a step-1 slice whose length does not depend on the sequence's (`-1:`,
    `-8:`, `:4`, `2:6`, `-8:-2`), as long as it fits in the sequence; None for any other slice."""
    if index.step not in (None, 1):
        return None
    start, stop = index.start or 0, index.stop
    if stop is None:
        return (start, -start) if start < 0 else None
    if (start < 0) != (stop < 0) or stop <= start:  # a length that depends on the sequence's, or nothing
        return None
    return start, stop - start


def _exact(positions: tuple[int, ...] | str, seq_dim: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """The general selection, with Python's indexing semantics (a slice is clipped to the sequence):
    a view for a slice, a copy for a list; `PositionError` for what does not fit."""
    index = _as_index(positions)
    contiguous = index if isinstance(index, slice) and index.step in (None, 1) else None
    written = positions if isinstance(positions, str) else list(positions)

    def select(value: torch.Tensor) -> torch.Tensor:
        ndim = value.dim()
        if not -ndim <= seq_dim < ndim:
            raise PositionError(
                f"positions {written!r} select along dim {seq_dim}, but the tensor has shape {tuple(value.shape)}; "
                "set the recorder's seq_dim to its sequence dimension."
            )
        if contiguous is not None:
            start, stop, _ = contiguous.indices(value.shape[seq_dim])
            kept = value.narrow(seq_dim, start, max(stop - start, 0))
        else:
            try:
                kept = value[(slice(None),) * (seq_dim % ndim) + (index,)]
            except IndexError:
                kept = None
        if kept is None or kept.shape[seq_dim] == 0:
            problem = "select nothing from" if isinstance(positions, str) else "are out of range for"
            raise PositionError(
                f"positions {written!r} {problem} a sequence of {value.shape[seq_dim]} "
                f"(dim {seq_dim} of shape {tuple(value.shape)})."
            )
        return kept

    return select


def positions_selector(positions: tuple[int, ...] | str, seq_dim: int, copy: bool = True) -> Callable[[Any], Any]:
    """A function that keeps `positions` of a tensor along `seq_dim`; any other value passes unchanged.

    With `copy`, the result always has its own storage of only the selected elements (a slice, a
    view, would keep the module's whole tensor alive); without, a slice may come back as a view (for
    a caller that copies anyway, `to`/`dtype`). Raises `PositionError` for a tensor without
    `seq_dim`, out-of-range positions or an empty selection.

    This runs once per captured value, so the common selections take one torch op and no Python
    check: a slice of fixed length (`[-1]`, `"-8:"`, `":4"`) is one `narrow_copy` (or `narrow`), a
    list of positions one `index_select` with an index tensor cached per sequence length and device.
    Whatever that op cannot do (torch raises: a sequence too short, no such dim, not a tensor) is
    redone by the exact general path, which gives Python's slice semantics or the located error.
    """
    exact = _exact(positions, seq_dim)
    index = _as_index(positions)
    clone = copy and isinstance(index, slice)  # a list is gathered, which copies already

    def general(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        return exact(value).clone() if clone else exact(value)

    if isinstance(index, list):
        return _copying(_list_selector(index, seq_dim, general), True)
    span = _fixed_span(index)
    if span is None:
        return _copying(general, copy)
    start, length = span
    take = torch.Tensor.narrow_copy if copy else torch.Tensor.narrow

    if start >= 0 or not copy:

        def select(value: Any) -> Any:
            try:
                return take(value, seq_dim, start, length)
            except Exception:  # not a tensor, no such dim, a sequence shorter than the span
                pass
            return general(value)

    else:

        def select(value: Any) -> Any:
            try:
                # narrow_copy's backward mis-places a negative start (torch 2.13: a zero gradient
                # for start -1), so with autograd the start is made absolute first.
                if not value.requires_grad:
                    return take(value, seq_dim, start, length)
                first = value.shape[seq_dim] + start
                if first >= 0:
                    return take(value, seq_dim, first, length)
            except Exception:  # not a tensor, no such dim, a sequence shorter than -start
                pass
            return general(value)

    return _copying(select, copy)


def _copying(select: Callable[[Any], Any], copies: bool) -> Callable[[Any], Any]:
    """`select`, marked with whether its result always has its own storage (read by the collector)."""
    select.copies = copies  # type: ignore[attr-defined]
    return select


# Index tensors kept per (sequence length, device) by one list selector, at most this many.
_INDEX_CACHE = 8


def _list_selector(positions: list[int], seq_dim: int, general: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A list of positions as one `index_select`, with its index tensor (negative positions made
    absolute) cached per sequence length and device; positions out of range take `general`."""
    cache: dict[tuple[int, Any], torch.Tensor] = {}

    def index_of(length: int, device: torch.device) -> torch.Tensor | None:
        absolute = [p + length if p < 0 else p for p in positions]
        if not all(0 <= p < length for p in absolute):
            return None
        if len(cache) >= _INDEX_CACHE:
            cache.clear()
        # A normal tensor even under inference_mode: index_select saves its index for backward.
        with torch.inference_mode(False):
            index = cache[(length, device)] = torch.tensor(absolute, device=device)
        return index

    def select(value: Any) -> Any:
        try:
            length = value.shape[seq_dim]  # (cheaper than size(seq_dim))
            index = cache.get((length, value.device))
            if index is None:
                index = index_of(length, value.device)
            if index is not None:
                return value.index_select(seq_dim, index)
        except Exception:  # not a tensor, no such dim
            pass
        return general(value)

    return select


class InputSource:
    """Which argument of a hooked module's forward a recorder records: a position or a keyword name.

    A name is looked up in the keyword arguments first; when the module was called positionally, the
    name's position in `target_class.forward`'s signature is used (known only for recorders with a
    target class). An argument the call did not pass is an error naming what the call did pass.
    """

    __slots__ = ("position", "name", "written")

    def __init__(self, input: int | str, target_class: type | tuple[type, ...] | None) -> None:
        self.written = input
        self.name = input if isinstance(input, str) else None
        self.position = input if isinstance(input, int) else _parameter_position(target_class, input)

    def take(self, path: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The argument of one call; `path` is the module's, for the error message."""
        where = self.where(path, args, kwargs)
        return kwargs[where] if isinstance(where, str) else args[where]

    def put(self, path: str, args: tuple[Any, ...], kwargs: dict[str, Any], value: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The call's arguments with this one replaced by `value` (new containers; the caller's are unchanged)."""
        where = self.where(path, args, kwargs)
        if isinstance(where, str):
            return args, {**kwargs, where: value}
        return args[:where] + (value,) + args[where + 1 :], kwargs

    def where(self, path: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | str:
        """The keyword name or the position of the argument in one call (`PositionError` if not passed)."""
        if self.name is not None and self.name in kwargs:
            return self.name
        position = self.position
        if position is not None and position < len(args):
            return position
        raise PositionError(
            f"the module at {path.lstrip('.') or '<root>'} was called with {len(args)} positional argument(s) "
            f"and keywords {sorted(kwargs)}, so it has no input {self.written!r}; set the recorder's input "
            "to a positional index or to one of those keywords."
        )

    def __repr__(self) -> str:
        return f"InputSource({self.written!r})"


def _parameter_position(target_class: type | tuple[type, ...] | None, name: str) -> int | None:
    """The positional index of parameter `name` of `target_class.forward` (without `self`), if any; for
    a tuple of classes, the index they all agree on."""
    if isinstance(target_class, tuple):
        found = {_parameter_position(cls, name) for cls in target_class}
        return found.pop() if len(found) == 1 else None
    forward = getattr(target_class, "forward", None)
    if forward is None:
        return None
    try:
        parameters = list(inspect.signature(forward).parameters.values())
    except (TypeError, ValueError):
        return None
    positional = [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if positional and positional[0] == "self":
        positional = positional[1:]
    return positional.index(name) if name in positional else None


def requested_positions(flag: Any) -> list[int] | None:
    """The positions an `output_hidden_states` value selects, or `None` when it is a plain flag."""
    if isinstance(flag, bool) or flag is None:
        return None
    if isinstance(flag, int):
        return [flag]
    return list(flag)


def resolve_selections(
    tasks: Iterable[tuple[str, OutputRecorder]],
    keys: Iterable[str],
    hidden_states_flag: Any,
    count_positions: Callable[[str, OutputRecorder], int | None],
) -> dict[str, frozenset[int]]:
    """Resolve the kept positions of each requested key.

    `hidden_states` follows an index/list `output_hidden_states` flag when one is given; otherwise a key
    whose recorders all declare `layers` keeps the union of them. `count_positions(key, recorder)` says
    how many positions the key will have, for negative indices (`None` when unknown).
    """
    tasks = tuple(tasks)
    if hidden_states_flag is None or hidden_states_flag is True or hidden_states_flag is False:
        for _, recorder in tasks:  # (a loop, not a generator: this runs on every capturing forward)
            if recorder.layers is not None:
                break
        else:
            return {}  # every position of every key is kept
    by_key: dict[str, list[OutputRecorder]] = {}
    for key, recorder in tasks:
        by_key.setdefault(key, []).append(recorder)
    selections: dict[str, frozenset[int]] = {}
    for key in keys:
        recorders = by_key.get(key)
        if not recorders:
            continue
        selected = requested_positions(hidden_states_flag) if key == "hidden_states" else None
        if selected is None and all(r.layers is not None for r in recorders):
            selected = sorted({i for r in recorders for i in r.layers or ()})
        if selected is not None:
            selections[key] = resolve_positions(selected, count_positions(key, recorders[0]), key)
    return selections


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


def position_counter(config: Any, hooked: Mapping[str, int] | None = None) -> Callable[[str, OutputRecorder], int | None]:
    """How many positions a key has, for its negative indices: the config's layer count (the recorder's
    `num_hidden_layers_key`), else the number of modules hooked for the key when `hooked` says it,
    else None (unknown); one more for `hidden_states` with its initial state."""

    def count(key: str, recorder: OutputRecorder) -> int | None:
        layers: int | None = getattr(config, recorder.num_hidden_layers_key, None)
        if layers is None:
            if hooked is None:
                return None
            layers = hooked.get(key, 0)
        return layers + int(key == "hidden_states" and recorder.capture_initial_hidden_state)

    return count
