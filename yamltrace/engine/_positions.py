"""Input capture and token-position selection: what a recorder takes besides an output element.

`InputSource` says which argument of a module's forward a recorder records (`OutputRecorder.input`);
`positions_selector` builds the function that keeps only some token positions of a captured tensor
(`OutputRecorder.positions` along `OutputRecorder.seq_dim`), so the positions left out are never
retained: a selection is always a tensor with its own, smaller storage, never a view of the module's.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Sequence
from typing import Any

import torch

__all__ = ["InputSource", "PositionError", "normalize_input", "normalize_positions", "positions_selector"]

# A slice written as text: "start:stop" or "start:stop:step", each part an optional integer.
_SLICE = re.compile(r"^\s*(-?\d+)?\s*:\s*(-?\d+)?\s*(?::\s*(-?\d+)?\s*)?$")


class PositionError(ValueError):
    """A captured tensor has no such dimension or positions; the collector adds which module and key."""


def normalize_input(value: Any) -> int | str | None:
    """`OutputRecorder.input` validated: a positional index (>= 0) or a keyword name, or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"OutputRecorder.input must be a positional index or an argument name, got {value!r}.")
    if isinstance(value, int) and value < 0:
        raise ValueError(f"OutputRecorder.input must be a positional index >= 0 or an argument name, got {value}.")
    if isinstance(value, str) and not value.isidentifier():
        raise ValueError(f"OutputRecorder.input: {value!r} is not an argument name.")
    return value


def normalize_positions(value: Any) -> tuple[int, ...] | str | None:
    """`OutputRecorder.positions` validated: a tuple of ints, a slice text such as `"-8:"`, or None.

    A single int is one position; a `slice` becomes its text. Kept hashable, so recorders stay keys.
    """
    if value is None:
        return None
    if isinstance(value, slice):
        parts = [value.start, value.stop] + ([value.step] if value.step is not None else [])
        if not all(p is None or isinstance(p, int) for p in parts):
            raise TypeError(f"OutputRecorder.positions: a slice must have int bounds, got {value!r}.")
        value = ":".join("" if p is None else str(p) for p in parts)
    if isinstance(value, str):
        match = _SLICE.match(value)
        if match is None:
            raise ValueError(f"OutputRecorder.positions: {value!r} is not a slice; write it like '-8:', ':4' or '0:10:2'.")
        if match.group(3) is not None and int(match.group(3)) <= 0:
            raise ValueError(f"OutputRecorder.positions: the step of {value!r} must be positive.")
        return value.replace(" ", "")
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,)
    if isinstance(value, Sequence) and value and all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        return tuple(value)
    raise TypeError(
        f"OutputRecorder.positions must be a non-empty list of ints or a slice text such as '-8:', got {value!r}."
    )


def _as_index(positions: tuple[int, ...] | str) -> slice | list[int]:
    """The index along the sequence dimension: a slice for a slice text or a single position, else a list."""
    if isinstance(positions, str):
        parts = [int(p) if p else None for p in positions.split(":")]
        return slice(*parts)
    if len(positions) == 1:
        (i,) = positions
        return slice(i, None if i == -1 else i + 1)
    return list(positions)


def positions_selector(positions: tuple[int, ...] | str, seq_dim: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """A function that keeps `positions` of a tensor along `seq_dim`, as a tensor with its own storage.

    A slice is a view that would keep the module's whole tensor alive, so it is copied (`clone`, which
    allocates only the selected elements); a list of positions is gathered, which copies already.
    Raises `PositionError` for a tensor without `seq_dim`, out-of-range positions or an empty selection.
    """
    index = _as_index(positions)
    is_slice = isinstance(index, slice)
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
            # narrow() costs a fraction of tensor indexing, which matters once per layer per forward.
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

    select.copies = not is_slice  # type: ignore[attr-defined]  # read by the collector: whether select copies already
    return select


class InputSource:
    """Which argument of a hooked module's forward a recorder records: a position or a keyword name.

    A name is looked up in the keyword arguments first; when the module was called positionally, the
    name's position in `target_class.forward`'s signature is used (known only for recorders with a
    target class). An argument the call did not pass is an error naming what the call did pass.
    """

    __slots__ = ("position", "name", "written")

    def __init__(self, input: int | str, target_class: type | None) -> None:
        self.written = input
        self.name = input if isinstance(input, str) else None
        self.position = input if isinstance(input, int) else _parameter_position(target_class, input)

    def take(self, path: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The argument of one call; `path` is the module's, for the error message."""
        if self.name is not None and self.name in kwargs:
            return kwargs[self.name]
        position = self.position
        if position is not None and position < len(args):
            return args[position]
        raise PositionError(
            f"the module at {path.lstrip('.') or '<root>'} was called with {len(args)} positional argument(s) "
            f"and keywords {sorted(kwargs)}, so it has no input {self.written!r}; set the recorder's input "
            "to a positional index or to one of those keywords."
        )

    def __repr__(self) -> str:
        return f"InputSource({self.written!r})"


def _parameter_position(target_class: type | None, name: str) -> int | None:
    """The positional index of parameter `name` of `target_class.forward` (without `self`), if any."""
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
