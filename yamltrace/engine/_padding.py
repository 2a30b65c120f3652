"""Padding-aware token positions (`positions: last` / `first`) and the padding check of literal positions.

A capture's *root call* is the call its hooks run inside: a step of a `trace` block (a call of the
traced module) or a `capture_outputs` forward. Its attention mask, the argument `attention_mask`
(or the one a recorder's `mask` names; by keyword, else at its place in the root forward's
signature), is `[batch, seq]`, nonzero for a real token. While a root call runs, `root_call` holds
it (per context, like the sessions), so a `last` / `first` selector keeps, per row, the last /
first real position: right or left padding alike. Without a mask every position counts (`last` is
`[-1]`, `first` is `[0]`). A mask longer than the captured sequence covers past and current
positions (a `generate` step with a cache): the current step's are its last columns.

`PaddingWatch` is what a plan with `positions` does around each root call: publish it (for `last` /
`first`), and warn, once, when a literal position falls on padding in a row of a forward given a mask.

How often and where that warning is given: per warning state, a one-item list the watch sets once it
warned; `warning_state` gives a capture its state (the one `shared_warning` opened, an `extract` run:
one per run; a decorated model's own; or a new one per `trace` or `intervene` block).
`caller_stacklevel` counts the frames between the check and the code that called the model (their
depth differs between a block, a decorated forward and a wrapped model), so the warning names the
caller's file and line.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar, Token
from typing import Any

import torch
import torch.nn.modules.module
from torch import nn
from torch.compiler import is_dynamo_compiling

from .._recorder_fields import PADDING_POSITIONS
from ..errors import PositionError
from ._intercept import Interception
from ._wrappers import unwrap

__all__ = [
    "DEFAULT_MASK",
    "PaddingWatch",
    "RootCall",
    "padding_rows",
    "padding_selector",
    "padding_watch",
    "root_call",
    "plan_watch",
    "tasks_watch",
    "caller_stacklevel",
    "shared_warning",
    "warning_state",
]

DEFAULT_MASK = "attention_mask"  # the argument read when a recorder names none (`OutputRecorder.mask`)
# The running root call, or None (no capture with positions runs in this context).
root_call: ContextVar[RootCall | None] = ContextVar("yamltrace_root_call", default=None)


class RootCall:
    """The arguments of one root call, and what was read from them: each named mask as a bool
    `[batch, seq]` tensor (None: not passed), each row index (`rows`)."""

    __slots__ = ("args", "kwargs", "places", "masks", "indices", "owner", "token", "calls")

    def __init__(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.args, self.kwargs, self.places = args, kwargs, _places(type(unwrap(module)))
        self.masks: dict[str, torch.Tensor | None] = {}
        self.indices: dict[tuple[Any, ...], torch.Tensor] = {}
        self.owner: object = None  # the hooks that published it (`PaddingWatch.hooks`), with their token
        self.token: Token[Any] | None = None
        self.calls: dict[int, int] = {}  # calls of edited modules in this call, by id (`_editing.CallCheck`)

    def argument(self, name: str) -> Any:
        """The argument `name` of the call (keyword, else by its place), or None."""
        if name in self.kwargs:
            return self.kwargs[name]
        place = self.places.get(name)
        return self.args[place] if place is not None and place < len(self.args) else None

    def mask(self, name: str) -> torch.Tensor | None:
        """The mask argument `name` as a bool `[batch, seq]` tensor, None when not given; a located
        `PositionError` for one that is not a 0/1 `[batch, seq]` tensor (an expanded 4-D mask)."""
        if name not in self.masks:
            self.masks[name] = _as_mask(self.argument(name), name)
        return self.masks[name]

    def rows(self, name: str, which: str, value: torch.Tensor, dim: int) -> torch.Tensor | None:
        """Per row of `value`, the index along `dim` of its `which` ("last", "first") real position,
        shaped to gather `value` (cached per call); None when the call has no mask `name`."""
        mask = self.mask(name)
        if mask is None:
            return None
        key = (name, which, value.shape[dim], value.device)
        index = self.indices.get(key)
        if index is None:
            index = self.indices[key] = _row_index(mask, name, which, value.shape[dim]).to(value.device)
        if value.shape[0] != index.shape[0]:
            raise PositionError(
                f"positions {which!r}: the mask {name!r} has {index.shape[0]} row(s), the tensor {value.shape[0]} "
                f"(shape {tuple(value.shape)}); positions last / first need dimension 0 to be the batch."
            )
        shape = [1] * value.dim()
        shape[0] = index.shape[0]
        return index.view(shape).expand(*value.shape[:dim], 1, *value.shape[dim + 1 :])


def _places(cls: type) -> dict[str, int]:
    """Each positional parameter of `cls.forward` (without `self`) by name (memoised per class)."""
    places = _PLACES.get(cls)
    if places is None:
        try:
            parameters = list(inspect.signature(getattr(cls, "forward")).parameters.values())
        except (TypeError, ValueError, AttributeError):
            parameters = []
        names = [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        places = _PLACES[cls] = {name: i for i, name in enumerate(names[1:] if names[:1] == ["self"] else names)}
    return places


_PLACES: dict[type, dict[str, int]] = {}


def _as_mask(value: Any, name: str) -> torch.Tensor | None:
    """`value` as a bool `[batch, seq]` mask (True: a real token), None for None."""
    if value is None:
        return None
    fix = "pass the 2-D [batch, seq] mask (1 for a token, 0 for padding), or name the argument that holds one with the recorder's mask"
    if not isinstance(value, torch.Tensor) or value.dim() != 2:
        what = f"shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else f"a {type(value).__name__}"
        raise PositionError(f"the root forward's {name!r} is {what}, not a [batch, seq] attention mask; {fix}.")
    if value.dtype == torch.bool:
        return value
    if (value.is_floating_point() or value.is_complex()) and bool(((value != 0) & (value != 1)).any()):
        raise PositionError(f"the root forward's {name!r} holds values other than 0 and 1 (an additive mask?); {fix}.")
    return value != 0


def _row_index(mask: torch.Tensor, name: str, which: str, length: int) -> torch.Tensor:
    """Per row, the index among the current `length` positions (the mask's last `length` columns)
    of its last / first real one; `PositionError` for a mask too short or a row without one."""
    if mask.shape[1] < length:
        raise PositionError(
            f"positions {which!r}: the mask {name!r} covers {mask.shape[1]} position(s), the tensor {length}; "
            "set the recorder's seq_dim to the sequence dimension, or mask to the mask of this sequence."
        )
    current = mask[:, mask.shape[1] - length :]
    order = torch.arange(length, device=mask.device)
    if which == "last":
        index = torch.where(current, order, -1).amax(1)
    else:
        index = torch.where(current, order, length).amin(1)
    empty = (~current.any(1)).nonzero().flatten().tolist()
    if empty:
        raise PositionError(
            f"positions {which!r}: row(s) {empty[:8]} of the mask {name!r} have no real position among the "
            f"{length} captured; drop those rows, or select literal positions."
        )
    return index


def padding_rows(which: str, seq_dim: int, mask: str | None, value: torch.Tensor) -> torch.Tensor | None:
    """Per row of `value`, the index of its `which` ("last" / "first") real position along `seq_dim`,
    by the running root call's mask `mask` (default `attention_mask`), shaped to `gather` `value`
    (`[batch, 1, ...]`); None where no root call or mask is known (then `last` is `[-1]`, `first` is
    `[0]`). `PositionError` for a `seq_dim` that is not a sequence dimension, or a mask that is not one.
    What a capture (`padding_selector`) and an edit (`_editing.Edit`) with `positions: last` both read."""
    call = root_call.get()
    if call is None:
        return None
    ndim = value.dim()
    if not -ndim <= seq_dim < ndim or seq_dim % ndim == 0:
        raise PositionError(
            f"positions {which!r} select along dim {seq_dim}, but the tensor has shape {tuple(value.shape)} "
            "(dimension 0 is the batch); set seq_dim to its sequence dimension."
        )
    return call.rows(mask or DEFAULT_MASK, which, value, seq_dim % ndim)


def padding_selector(which: str, seq_dim: int, mask: str | None, fallback: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A selector keeping, per row, the `which` ("last" / "first") real position along `seq_dim`
    (`padding_rows`); `fallback` (the literal `[-1]` / `[0]` selector) where no root call or mask is
    known, and for values that are not tensors. The dimension is kept (`[batch, 1, ...]`, as `[-1]`
    gives); the result is a copy (`gather`)."""

    def select(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return fallback(value)
        index = padding_rows(which, seq_dim, mask, value)
        return fallback(value) if index is None else value.gather(seq_dim % value.dim(), index)

    select.copies = True  # type: ignore[attr-defined]
    return select


class PaddingWatch:
    """What a capture (or the edits) whose recorders keep `positions` does around each root call
    (`enter`, `exit`): publish the call (`root_call`) for `last` / `first`, and check the `literal`
    selections, `(name, positions, mask name)`: when a position falls on padding in a row of the
    call's mask, warn (once per `warned` state), naming the fix. `kind` is what the selections are:
    "output" (a capture's) or "intervention" (edits', which then change padding)."""

    __slots__ = ("literal", "kind", "aware", "_masks")

    def __init__(
        self, literal: tuple[tuple[str, tuple[int, ...] | str, str], ...], kind: str = "output", aware: bool = True
    ) -> None:
        self.literal, self.kind, self.aware = literal, kind, aware  # aware: some selection is last / first
        self._masks = frozenset(name for _, _, name in literal)  # the mask arguments the check reads

    def enter(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], warned: list[bool]) -> Token[Any]:
        """A root call of `module` starts: checked (`check`) and published; pass the token to `exit` when it ends."""
        call = RootCall(module, args, kwargs)
        if self.literal and not warned[0]:
            self._warn(call, warned)  # (before `set`: a warning raised as an error leaves nothing set)
        return root_call.set(call)

    def check(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], warned: list[bool]) -> None:
        """A root call of a capture without `last` / `first` starts: checked, not published (nothing
        reads it); a call passing only keywords, none of them a mask, has nothing to check."""
        if self.literal and not warned[0] and (args or not self._masks.isdisjoint(kwargs)):
            self._warn(RootCall(module, args, kwargs), warned)

    def _warn(self, call: RootCall, warned: list[bool]) -> None:
        """Warn (once per `warned` state) when the call's literal positions fall on padding."""
        try:
            message = self._padded(call)
        except PositionError:  # a mask that is not one: the capture's own selectors say so, located
            message = None
        if message is not None:
            warned[0] = True
            warnings.warn(message, stacklevel=caller_stacklevel())  # (at the root call's caller)

    @staticmethod
    def exit(token: Token[Any]) -> None:
        """The root call ends."""
        root_call.reset(token)

    def frame(self, module: nn.Module, is_active: Callable[[], bool], warned: Callable[[], list[bool]]) -> tuple[Any, Any]:
        """`enter` and `exit` as an interception frame on `module` (`_intercept`), for calls made while
        `is_active()`, against the warning state `warned()` gives per call (a kept `trace` run's, per
        block). (A capture with literal positions only needs no frame: its root calls are `check`ed.)"""

        def enter(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Token[Any] | None:
            return self.enter(module, args, kwargs, warned()) if is_active() else None

        def exit(token: Token[Any] | None, output: Any, finished: bool) -> None:
            if token is not None:
                root_call.reset(token)

        return enter, exit

    def hooks(
        self,
        module: nn.Module,
        is_active: Callable[[], bool],
        warned: list[bool],
        into: Interception,
    ) -> None:
        """`enter` and `exit` as forward hooks on `module` (the exit one runs also when the forward
        raises), for calls made while `is_active()`; `into` owns them."""
        owner = object()

        def before(_: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            # Dynamo cannot set a ContextVar: inside compiled code, skip the root call where nothing needs
            # it (only warnings); with `last` / `first`, set it anyway, so dynamo runs this hook eagerly
            # (a graph break; an error under fullgraph), never a silent fallback to [-1] / [0].
            if (self.aware or not is_dynamo_compiling()) and is_active():
                token = self.enter(module, args, kwargs, warned)
                call: RootCall = root_call.get()  # type: ignore[assignment]
                call.owner, call.token = owner, token

        def after(_: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
            call = None if is_dynamo_compiling() else root_call.get()
            if call is not None and call.owner is owner:
                root_call.reset(call.token)  # type: ignore[arg-type]

        into.observe(module, before, after)

    def _padded(self, call: RootCall) -> str | None:
        """The warning for the literal recorders whose positions select padding in this call, or None."""
        found = []
        for output, positions, name in self.literal:
            mask = call.mask(name)
            if mask is None:
                continue
            length = _step_length(call, name, mask.shape[1])
            columns = [mask.shape[1] - length + c for c in _selected(positions, length)]
            rows = (~mask[:, columns]).any(1).nonzero().flatten().tolist() if columns else []
            if rows:
                written = positions if isinstance(positions, str) else list(positions)
                found.append(
                    f"{self.kind} {output!r} (positions {written!r}): {len(rows)} of {mask.shape[0]} row(s) of {name!r}, rows {rows[:8]}"
                )
        if not found:
            return None
        what, once = _WORDS[self.kind]
        return (
            f"yamltrace: literal positions fall on padding, so {what}, not text: "
            + "; ".join(found)
            + ". Write `positions: last` (or `first`) for each row's last (first) real token, which follows the "
            f"attention mask; literal positions count from the padded ends. (Warned once per {once}.)"
        )


# Per kind of watch: what a literal position on padding means, and how often it is said.
_WORDS = {
    "output": ("these captures hold padding tokens", "trace"),
    "intervention": ("these edits change padding tokens", "intervene block or interventions handle"),
}


def _step_length(call: RootCall, name: str, total: int) -> int:
    """How many positions the call processes: the length of its `input_ids` / `inputs_embeds`
    (`decoder_input_ids` for `decoder_attention_mask`, ...), else the mask's (`total`)."""
    if name.endswith(DEFAULT_MASK):
        prefix = name[: -len(DEFAULT_MASK)]
        for argument in (prefix + "input_ids", prefix + "inputs_embeds"):
            value = call.argument(argument)
            if isinstance(value, torch.Tensor) and value.dim() >= 2 and value.shape[1] <= total:
                return int(value.shape[1])
    return total


def _selected(positions: tuple[int, ...] | str, length: int) -> list[int]:
    """The positions a literal selection keeps of `length` (Python's indexing); none when out of range."""
    if isinstance(positions, str):
        return list(range(length)[slice(*(int(p) if p else None for p in positions.split(":")))])
    absolute = [p + length if p < 0 else p for p in positions]
    return absolute if all(0 <= p < length for p in absolute) else []


def padding_watch(
    selections: Iterable[tuple[str, tuple[int, ...] | str | None, str | None]], kind: str = "output"
) -> PaddingWatch | None:
    """The watch of a capture's `(output name, positions, mask)` selections (or edits', `kind`
    "intervention"), None when none keeps positions."""
    literal, aware = [], False
    for output, positions, mask in selections:
        if positions is None:
            continue
        if positions in PADDING_POSITIONS:
            aware = True
        else:
            literal.append((output, positions, mask or DEFAULT_MASK))
    return PaddingWatch(tuple(dict.fromkeys(literal)), kind, aware) if literal or aware else None


def plan_watch(plan: Any) -> PaddingWatch | None:
    """The watch of a `trace` block's plan (`_trace_plan.TracePlan`): the selections of its outputs'
    entries (`Transform.selects`, set by `transform_of`)."""
    names = {(output.scope, output.key): output.name for output in plan.outputs}
    return padding_watch(
        (names[(scope.number, entry.key)], *getattr(entry.transform, "selects", (None, None)))
        for scope in plan.scopes
        for row in scope.hooks
        for entry in row.entries
        if (scope.number, entry.key) in names
    )


def tasks_watch(tasks: tuple[tuple[str, Any], ...]) -> PaddingWatch | None:
    """The watch of a decorated forward's `(key, OutputRecorder)` tasks (None without positions)."""
    return padding_watch((key, r.positions, r.mask) for key, r in tasks)


# A warning state shared by the traces of one `extract` run (`shared_warning`): one warning per run.
_shared: ContextVar[dict[str, list[bool]] | None] = ContextVar("yamltrace_padding_warned", default=None)
# yamltrace's own files and torch's module code (`Module.__call__`, the containers' forwards), as the
# import system named them (as frames name their files: not resolved, so a symlinked install matches).
_INSIDE = (os.path.dirname(os.path.dirname(__file__)) + os.sep, os.path.dirname(torch.nn.modules.module.__file__) + os.sep)


def warning_state(model: nn.Module | None = None, kind: str = "output") -> list[bool]:
    """Whether the padding warning of a `kind` of watch (`PaddingWatch`) was given: the state
    `shared_warning` opened in this context, else `model`'s (one warning per decorated model), else a
    new one (one per `trace` or `intervene` block)."""
    shared = _shared.get()
    if shared is not None:
        return shared.setdefault(kind, [False])
    if model is None:
        return [False]
    state = _BY_MODEL.get(model)
    if state is None:
        state = _BY_MODEL[model] = [False]
    return state


_BY_MODEL: weakref.WeakKeyDictionary[nn.Module, list[bool]] = weakref.WeakKeyDictionary()


@contextlib.contextmanager
def shared_warning() -> Iterator[None]:
    """A context in which every capture shares one padding warning, and all edits another (`extract`:
    one per run)."""
    token = _shared.set({})
    try:
        yield
    finally:
        _shared.reset(token)


def caller_stacklevel() -> int:
    """The `stacklevel` for `warnings.warn` in the function calling this one that points at the first
    frame outside yamltrace and torch's module code: the code that called the model."""
    frame = sys._getframe(1)
    level = 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_INSIDE):
        frame = frame.f_back
        level += 1
    return level
