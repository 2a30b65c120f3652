"""Interventions on a model: what an edit does to one module's values (`Edit`), which modules it edits
(`plan_edits`), the gates that put it on the modules' torch hooks (`install_edits`), how many heads
a module's tensors split into (`head_count`), and the check that `layers` of a module running twice
means what it says (`CallCheck`).

An edit builds new tensors (out-of-place ops only), so autograd sees it: a value that requires grad
gets gradients, and the module's own tensor is never written. A region (`positions` along `seq_dim`,
`heads` of the last dimension) is taken with `index_select`, edited, and put back with the
out-of-place `index_copy`. A value applies by torch's broadcasting to the region, which must keep the
region's shape (a vector is along the last dimension); a value with the whole tensor's shape (a
capture of another run) is cut like the tensor; with one position, a value may leave the sequence
dimension out (`[batch, hidden]`). Anything else is a located `SpecError` at the call.

Gates: an edit applies to the calls a block session records (`block_open`, the listeners' gate), or
to every call (`apply_interventions`); add or scale of a whole tensor by a number or a vector calls
the torch op itself where the value applies as it is (`Edit.direct`), anything else takes
`Edit.tensor`, the general path and the home of the rules (tests/unit/engine/internals/test_edit_paths.py runs each
copy against it).

Heads: the count is the nearest module's, walking from the edited (or captured) module up to the
root: an attention module's `num_heads` or `head_dim`, else a model's `config.num_attention_heads`;
the walk (`head_sources`) runs when an edit is planned, the count (`count_heads`) at each call.

`layers` and calls: an intervention's `layers` count the modules its selector matches, in module
order, and the edit applies to every call of each; a capture's count values in call order. A module
shared between layers (ALBERT's layer, a looped block) runs several times per forward, where the two
differ: `CallCheck` counts the calls of such edited modules per root call and warns once per block or
handle, at the intervention and at the model code that calls the module the second time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import torch
from torch import nn
from torch.compiler import is_compiling

from ..errors import PositionError, SpecError, SpecIssue
from .._recorder_fields import PADDING_POSITIONS
from .._intervention import Intervention, RuntimeValue
from ._padding import PaddingWatch, padding_rows, padding_watch
from ._plan import plan_hooks
from ._positions import InputSource, positions_index
from ._positions import position_counter, resolve_positions
from functools import partial
from typing import cast
from ._collector import block_open, session_records
from ._intercept import INPUTS, OUTPUTS, Interception
import warnings
from torch.compiler import is_dynamo_compiling
from ._intercept import InputEdit
from ._padding import root_call
from ._padding import caller_stacklevel

__all__ = [
    "Edit",
    "EditRow",
    "edited_modules",
    "edits_watch",
    "plan_edits",
    "edit_issue",
    "HeadSources",
    "count_heads",
    "head_count",
    "head_sources",
    "install_edits",
    "CallCheck",
]

# A region step of `Edit.tensor`: (dim, index, per_row), `Edit._region` says what each means.
Step = tuple[int, torch.Tensor, bool]
_KEY = "intervention"  # the key an intervention's selector is planned under (never `hidden_states`)


def edit_issue(intervention: Intervention, message: str) -> SpecIssue:
    """The issue `message` located where the intervention is written (`$.interventions.NAME`)."""
    if intervention.where is not None:
        return dataclasses.replace(intervention.where, message=message)
    return SpecIssue(message, f"$.interventions.{intervention.name}")


class Edit:
    """One intervention on one module (dotted `path`): `output(output)` or `inputs(args, kwargs)`
    returns what the module returns or receives, edited. `value` is this module's (a float, a tensor,
    `(low, high)` or None); `heads` is what the modules from this one up say about heads (`head_sources`),
    which the tensor's width turns into a count at the call (with `head_dim`, that width alone)."""

    __slots__ = (
        "iv", "path", "value", "index", "source", "positions", "seq_dim", "split", "heads", "whole", "_apply", "_cache",
        "_tensor", "_grows", "_rows",
    )  # fmt: skip

    def __init__(self, intervention: Intervention, path: str, value: Any, heads: HeadSources) -> None:
        select = intervention.select
        self.iv, self.path, self.value, self.heads = intervention, path, value, heads
        self.split = intervention.heads is not None  # the edit keeps to some heads
        self.index = select.index
        self.source = None if select.input is None else InputSource(select.input, select.target_class)
        self.positions, self.seq_dim = select.positions, select.seq_dim
        # `last` / `first`: per row, by the root call's mask (`_padding`); without one, `[-1]` / `[0]`.
        self._rows = select.positions if select.positions in PADDING_POSITIONS else None
        if self._rows is not None:
            self.positions = (-1,) if self._rows == "last" else (0,)
        self.whole = self.positions is None and not self.split  # the whole tensor is edited
        # add and scale are torch's own functions (no Python frame per call); the others are methods.
        builtins: dict[str, Callable[[torch.Tensor, Any], torch.Tensor]] = {"add": torch.add, "scale": torch.mul}
        builtin = builtins.get(intervention.operation)
        self._apply: Callable[[torch.Tensor, Any], torch.Tensor] = builtin or getattr(self, f"_{intervention.operation}")
        self._cache: dict[tuple[Any, ...], Any] = {}  # index tensors
        self._tensor = isinstance(value, torch.Tensor)
        # Whether the value could change the edited shape (add, scale by a tensor of 1 or more
        # dimensions, broadcasting); a number, a 0-dim tensor, set and the others cannot.
        self._grows = self._tensor and intervention.operation in ("add", "scale") and value.dim() > 0

    def error(self, message: str) -> SpecError:
        where = self.path.lstrip(".") or "<root>"
        return SpecError([edit_issue(self.iv, f"intervention {self.iv.name!r}, module {where}: {message}")])

    def direct(self) -> tuple[Callable[[torch.Tensor, Any], torch.Tensor] | None, int | None]:
        """For add or scale of the whole tensor by a number or a vector: the torch function `_edited`
        calls, and the vector's length (None for a number); `(None, None)` for any other edit."""
        if not self.whole or self.iv.operation not in ("add", "scale") or self._tensor and self.value.dim() != 1:
            return None, None
        return self._apply, int(self.value.shape[0]) if self._tensor else None

    def output(self, output: Any) -> Any:
        """The module's output with the selected element (`index` of a tuple, else all) edited."""
        if not isinstance(output, tuple):
            return self.tensor(output)
        index = self.index
        if not -len(output) <= index < len(output) or output[index] is None:
            got = "None" if -len(output) <= index < len(output) else f"a tuple of {len(output)}"
            raise self.error(
                f"element {index} of the output is to be edited, but the module returned {got} there; fix the index."
            )
        index %= len(output)
        items = output[:index] + (self.tensor(output[index]),) + output[index + 1 :]
        return items if type(output) is tuple else type(output)(*items)

    def inputs(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The module's arguments with the selected one (`input`) edited."""
        source: InputSource = self.source  # type: ignore[assignment]
        try:
            return source.put(self.path, args, kwargs, self.tensor(source.take(self.path, args, kwargs)))
        except PositionError as e:
            raise self.error(str(e)) from None

    def tensor(self, t: Any) -> torch.Tensor:
        """`t` edited: the whole tensor, or its region (module docstring)."""
        if not isinstance(t, torch.Tensor):
            raise self.error(f"it gives a {type(t).__name__}, not a tensor; select a tensor (index, input).")
        value = self.value
        if self._tensor and value.dtype is not t.dtype:
            value = self._matched(t)
        if self.whole:
            return self._edited(t, value)
        if self._tensor and value.device != t.device:
            value = self._matched(t)
        full = isinstance(value, torch.Tensor) and value.dim() > 1 and value.shape == t.shape
        view, steps = t, []
        if self.split:
            count = self._head_count(t)
            view = t.reshape(t.shape[:-1] + (count, t.shape[-1] // count))
            value = value.reshape(view.shape) if full else value
            steps.append((view.dim() - 2, self._heads(count, t.device), False))
        if self.positions is not None:
            steps.insert(0, self._position_step(view, self._seq(t)))
        one = self.positions is not None and (steps[0][2] or len(steps[0][1]) == 1)
        if one and not full and isinstance(value, torch.Tensor) and 2 <= value.dim() == view.dim() - 1:
            value = value.unsqueeze(steps[0][0])  # a value for one position, without the sequence dimension
        edited = self._region(view, value, steps, full)
        return edited.flatten(-2) if self.split else edited

    def _region(self, x: torch.Tensor, value: Any, steps: list[Step], full: bool) -> torch.Tensor:
        """`x` with the region `steps` select edited: each step `(dim, index, per_row)` takes `index`
        along `dim` (`index_select`, put back by `index_copy`), or with `per_row` one position per row
        (`gather`, put back by `scatter`); all out of place, so autograd sees the edit."""
        if not steps:
            return self._edited(x, value)
        (dim, index, per_row), rest = steps[0], steps[1:]
        if per_row:
            part = self._region(x.gather(dim, index), value.gather(dim, index) if full else value, rest, full)
            return x.scatter(dim, index, part)
        part = self._region(x.index_select(dim, index), value.index_select(dim, index) if full else value, rest, full)
        return x.index_copy(dim, index, part)

    def _edited(self, x: torch.Tensor, value: Any) -> torch.Tensor:
        """The operation on `x`; a value on another device is moved there (a torch error tells), and
        one that would change `x`'s shape is the located error."""
        try:
            edited = self._apply(x, value)
        except RuntimeError:
            if not self._tensor or value.device == x.device:
                raise self._misfit(value, x) from None
            value = self._matched(x)
            edited = self._apply(x, value)
        if self._grows and edited.shape != x.shape:
            raise self._misfit(value, x)
        return edited

    def _matched(self, t: torch.Tensor) -> Any:
        """The value in `t`'s dtype and on its device: kept converted for the next calls, unless it
        requires grad (then converted per call, so each call's graph is its own)."""
        value = self.value.to(device=t.device, dtype=t.dtype)
        if not self.value.requires_grad and not is_compiling():
            self.value = value
        return value

    def _cached(self, key: tuple[Any, ...], make: Callable[[], Any]) -> Any:
        """`make()`, kept under `key` (not while dynamo traces: its sizes may be symbolic)."""
        if is_compiling():
            return make()
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = make()
        return found

    def _misfit(self, value: torch.Tensor, x: torch.Tensor) -> SpecError:
        """The error of a value that does not broadcast to `x` keeping `x`'s shape."""
        region = "" if self.positions is None and not self.split else " selected"
        return self.error(
            f"its value of shape {tuple(value.shape)} does not broadcast to the{region} values of shape "
            f"{tuple(x.shape)} (a vector is along the last dimension); give a value of that shape."
        )

    def _seq(self, t: torch.Tensor) -> int:
        if not -t.dim() <= self.seq_dim < t.dim():
            raise self.error(
                f"positions select along dim {self.seq_dim}, but the tensor has shape {tuple(t.shape)}; set seq_dim."
            )
        return self.seq_dim % t.dim()

    def _position_step(self, view: torch.Tensor, dim: int) -> Step:
        """The step of `positions` along `dim` of `view`: literal positions, or with `last` / `first` each
        row's real one by the root call's mask (`padding_rows`; literal `[-1]` / `[0]` without one)."""
        if self._rows is not None:
            try:
                index = padding_rows(self._rows, dim, self.iv.select.mask, view)
            except PositionError as e:
                raise self.error(str(e)) from None
            if index is not None:
                return dim, index, True
        return dim, self._positions(view.shape[dim], view.device), False

    def _positions(self, length: int, device: torch.device) -> torch.Tensor:
        return self._cached(("positions", length, device), lambda: _index_tensor(self._picked(length), device))  # type: ignore[no-any-return]

    def _picked(self, length: int) -> list[int]:
        try:
            picked = positions_index(self.positions, length)  # type: ignore[arg-type]
        except PositionError as e:
            raise self.error(str(e)) from None
        if len(set(picked)) < len(picked):
            raise self.error(f"positions {list(self.positions or ())} name position(s) twice in a sequence of {length}.")
        return picked

    def _head_count(self, t: torch.Tensor) -> int:
        size, head_dim = t.shape[-1], self.iv.head_dim
        count = size // head_dim if head_dim else count_heads(self.heads, size)
        if count is None:
            raise self.error(
                f"no module from {self.path.lstrip('.') or '<root>'} up to the root says how its last dimension ({size}) "
                "splits into heads (num_heads, head_dim or config.num_attention_heads); set head_dim."
            )
        if not count or size % count or (head_dim and count * head_dim != size):
            split = f"heads of {head_dim}" if head_dim else f"{count} heads"
            raise self.error(f"its last dimension ({size}, shape {tuple(t.shape)}) does not split into {split}; set head_dim.")
        return int(count)

    def _heads(self, count: int, device: torch.device) -> torch.Tensor:
        heads = self.iv.heads or ()
        if not all(-count <= h < count for h in heads) or len({h % count for h in heads}) < len(heads):
            raise self.error(f"heads {list(heads)} are not distinct heads of {count}.")
        return self._cached(("heads", count, device), lambda: _index_tensor([h % count for h in heads], device))  # type: ignore[no-any-return]

    # The operations, on a region `x` and this module's value (`_edited` checks what they give).
    def _zero(self, x: torch.Tensor, value: Any) -> torch.Tensor:
        return torch.zeros_like(x)

    def _set(self, x: torch.Tensor, value: Any) -> torch.Tensor:
        if not isinstance(value, torch.Tensor):
            return torch.full_like(x, value)
        return value.expand(x.shape).clone(memory_format=torch.contiguous_format)

    def _clamp(self, x: torch.Tensor, value: Any) -> torch.Tensor:
        return x.clamp(*value)


def _index_tensor(picked: list[int], device: torch.device) -> torch.Tensor:
    # A normal tensor even under inference_mode: index_select saves its index for backward.
    with torch.inference_mode(False):
        return torch.tensor(picked, device=device)


class EditRow(NamedTuple):
    """One edited module of a plan: the module, its dotted path (leading dot), its `Edit`."""

    module: nn.Module
    path: str
    edit: Edit


def edited_modules(root: nn.Module, iv: Intervention) -> list[tuple[nn.Module, str]]:
    """The modules an intervention edits, in module order: those its selector hooks (the recorder
    rules, `plan_hooks`), kept by its `layers` (which count them, or the config's layer count for
    negative ones); each with its dotted path (leading dot)."""
    rows = plan_hooks(root, [(_KEY, iv.select)], nested_maps=False)
    if iv.select.layers is not None:
        count = position_counter(getattr(root, "config", None), {_KEY: len(rows)})(_KEY, iv.select)
        outside = [i for i in iv.select.layers if count and rows and not -count <= i < count]
        if outside and count:
            raise SpecError(
                [
                    edit_issue(
                        iv,
                        f"intervention {iv.name!r}: {'layer' if len(outside) == 1 else 'layers'} "
                        f"{', '.join(map(str, outside))} out of range: its selector matches {len(rows)} module(s) of "
                        f"{type(root).__name__}, counted as {count} layer(s); valid indices are {-count}..{count - 1}. "
                        "Fix the intervention's `layers`.",
                    )
                ]
            )
        kept = resolve_positions(iv.select.layers, count, f"intervention {iv.name!r}")
        rows = [row for i, row in enumerate(rows) if i in kept]
    return [(module, path) for module, path, _ in rows]


def plan_edits(
    root: nn.Module, interventions: Sequence[Intervention], values: Mapping[str, Any]
) -> list[tuple[Intervention, list[EditRow]]]:
    """For each intervention in order, the modules it edits (`edited_modules`), each with its value
    (`values[NAME]` for `{value: NAME}`: one tensor for all, or a sequence of one per module).
    `SpecError` for a value missing or miscounted."""
    planned = []
    for iv in interventions:
        modules = edited_modules(root, iv)
        per_module = _values(iv, len(modules), values)
        edits = [
            EditRow(module, path, Edit(iv, path, value, _heads(iv, root, path)))
            for (module, path), value in zip(modules, per_module)
        ]
        planned.append((iv, edits))
    return planned


def _values(iv: Intervention, count: int, values: Mapping[str, Any]) -> list[Any]:
    """The value of each of the `count` modules an intervention edits."""
    value = iv.value
    if isinstance(value, RuntimeValue):
        if value.name not in values:
            raise _error(iv, f"intervention {iv.name!r} takes {{value: {value.name}}}: pass values={{{value.name!r}: tensor}}.")
        given = values[value.name]
        if isinstance(given, (list, tuple)):
            if len(given) != count:
                raise _error(
                    iv,
                    f"values[{value.name!r}] holds {len(given)} tensors for the {count} modules intervention {iv.name!r} edits; give one per module, or one tensor for all.",
                )
            return [_as_value(iv, v) for v in given]
        value = given
    if isinstance(value, tuple) and iv.operation in ("add", "set"):
        value = torch.tensor(value)  # a vector along the last dimension
    return [_as_value(iv, value)] * count


def _error(iv: Intervention, message: str) -> SpecError:
    return SpecError([edit_issue(iv, message)])


def _as_value(iv: Intervention, value: Any) -> Any:
    """`value`, when the operation can take it (a `SpecError` located at the intervention otherwise)."""
    if iv.operation == "clamp":
        if not isinstance(value, tuple) or len(value) != 2 or value == (None, None):
            raise _error(iv, f"intervention {iv.name!r}: clamp takes [low, high], at most one of them null; got {value!r}.")
        return value
    if iv.operation != "zero" and (not isinstance(value, (torch.Tensor, int, float)) or isinstance(value, bool)):
        raise _error(iv, f"intervention {iv.name!r}: its value is a {type(value).__name__}; give a number, a vector or a tensor.")
    return value


def _heads(iv: Intervention, root: nn.Module, path: str) -> HeadSources:
    """What the modules from the edited one (dotted `path`) up to `root` say about heads, for an
    intervention with `heads` and no `head_dim`: the count is taken at the call, from the tensor's
    width, by the rule `Captures.split_heads` follows (`head_count`)."""
    if iv.heads is None or iv.head_dim is not None:
        return ()
    sources = head_sources(root, path.lstrip("."))
    if not sources:
        raise _error(
            iv,
            f"intervention {iv.name!r} selects heads, but neither module {path.lstrip('.') or '<root>'} nor any "
            "above it has num_heads, head_dim or a config's num_attention_heads; set head_dim.",
        )
    return sources


def edits_watch(rows: Sequence[EditRow], checked: bool = False) -> PaddingWatch | None:
    """The padding watch of planned edits (`_padding`): what publishes the root call to `positions:
    last` / `first` and, when `checked`, to the check of `layers` (`CallCheck`), and warns when
    literal positions edit padding; None when no edit keeps positions and nothing is `checked`."""
    interventions = dict.fromkeys(row.edit.iv for row in rows)  # each once, in order
    watch = padding_watch(((iv.name, iv.select.positions, iv.select.mask) for iv in interventions), "intervention")
    return PaddingWatch((), "intervention", aware=False) if watch is None and checked else watch


# Per module from the one at a path up to the root, nearest first: its `num_heads`, its `head_dim`
# and its config's `num_attention_heads`, each None where it has none (a positive int otherwise).
HeadSources = tuple[tuple[int | None, int | None, int | None], ...]


def _positive(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def head_sources(model: nn.Module, path: str) -> HeadSources:
    """What the module at `path` of `model` (a `named_modules()` name, `""` for the root) and each
    module above it say about heads, nearest first; modules that say nothing are left out."""
    parts = path.split(":")[0].split(".") if path else []
    found = []
    for depth in range(len(parts), -1, -1):
        try:
            module = model.get_submodule(".".join(parts[:depth]))
        except AttributeError:
            continue
        said = (
            _positive(getattr(module, "num_heads", None)),
            _positive(getattr(module, "head_dim", None)),
            _positive(getattr(getattr(module, "config", None), "num_attention_heads", None)),
        )
        if said != (None, None, None):
            found.append(said)
    return tuple(found)


def count_heads(sources: HeadSources, width: int) -> int | None:
    """The number of heads a last dimension of `width` splits into by the nearest source that says
    (a `head_dim` says only for a width it divides); None when none does."""
    for heads, head_dim, config_heads in sources:
        if heads is not None:
            return heads
        if head_dim is not None and width % head_dim == 0:
            return width // head_dim
        if config_heads is not None:
            return config_heads
    return None


def head_count(model: nn.Module, path: str, width: int) -> int | None:
    """The number of heads a last dimension of `width` splits into for the module at `path` of `model`
    (a `named_modules()` name, `""` for the root); None when no module on the way up says."""
    return count_heads(head_sources(model, path), width)


def install_edits(rows: Sequence[EditRow], session: Any, into: Interception) -> list[bool]:
    """Put each row's edit on its module, in order, owned by `into`: applied to calls `session` records
    (a block session, `session_records`), or to every call with `session` None. Returns, per row,
    whether its edit has applied since (kept for a block session only: what its end reports)."""
    ran = [False] * len(rows)
    into.add(
        edits=[
            (module, OUTPUTS if edit.source is None else INPUTS, _gated(edit, session, ran, i))
            for i, (module, _, edit) in enumerate(rows)
        ]
    )
    return ran


def _gated(edit: Edit, session: Any, ran: list[bool], row: int) -> Callable[..., Any]:
    """The edit, for calls `session` records (every call with `session` None); other calls pass through,
    and one it applies to sets `ran[row]` (with a session). An output edit asks `block_open` and calls
    the torch op itself where `Edit.direct` allows, else `Edit.tensor` (tests/unit/engine/internals/test_edit_paths.py
    runs these copies against both)."""
    if edit.source is not None:
        if session is None:
            return edit.inputs

        def inputs(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
            if not session_records(session):
                return args, kwargs
            ran[row] = True
            return edit.inputs(args, kwargs)

        return inputs
    whole, tensor, is_tensor = edit.output, edit.tensor, torch.Tensor
    op, size = edit.direct()
    if op is None or size is None:
        tensor = tensor if op is None else partial(cast(Any, op), other=edit.value)  # (a number: nothing to check)

        def output(output: Any) -> Any:
            if session is not None:
                if not block_open(session):
                    return output
                ran[row] = True
            return tensor(output) if type(output) is is_tensor else whole(output)

        return output

    def vector(output: Any) -> Any:
        if session is not None:
            if not block_open(session):
                return output
            ran[row] = True
        if type(output) is not is_tensor:
            return whole(output)
        value = edit.value  # (read per call: `Edit.tensor` may keep it converted)
        try:
            if value.dtype is output.dtype and output.shape[-1] == size:
                return op(output, value)
        except (RuntimeError, IndexError):
            pass  # (on another device, or no last dimension: the general path moves it, or tells)
        return tensor(output)

    return vector


class CallCheck:
    """The check of the `rows` whose intervention has `layers`: `install()` counts each one's calls per
    root call (the root call's `calls`, set by the padding watch's root hooks) and warns, once per
    block or handle, when one runs a second time in a call. It runs in every block: whether a module
    runs once per call can change with the input (a loop whose count depends on it)."""

    def __init__(self, rows: Sequence[EditRow]) -> None:
        self.rows = rows
        self.warned = [False]

    @classmethod
    def of(cls, rows: Sequence[EditRow]) -> CallCheck | None:
        """The check of `rows`, None when none needs one."""
        kept = [row for row in rows if row.edit.iv.select.layers is not None]
        return cls(kept) if kept else None

    def install(self, into: Interception) -> None:
        """Put the counting on the checked modules, owned by `into`: an input entry that changes nothing
        (the module's forward pre-hook; no frame, which would add two more hooks)."""
        into.add(edits=[(row.module, INPUTS, _counter(row, self.warned)) for row in self.rows])


def _counter(row: EditRow, warned: list[bool]) -> InputEdit:
    key = id(row.edit)  # per intervention and module: two edits of one module count apart

    def count(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        call = None if is_dynamo_compiling() else root_call.get()
        if call is not None:
            calls = call.calls[key] = call.calls.get(key, 0) + 1
            if calls == 2 and not warned[0]:
                warned[0] = True
                warnings.warn(_message(row), stacklevel=caller_stacklevel())  # (at the model code calling the module)
        return args, kwargs

    return count


def _message(row: EditRow) -> str:
    iv = row.edit.iv
    message = (
        f"intervention {iv.name!r} (layers {list(iv.select.layers or ())}) edits module {row.path.lstrip('.') or '<root>'}, "
        "which runs more than once in one forward: the edit applies to each of its calls. An intervention's layers "
        "count the modules its selector matches, in module order, not their calls as a capture's layers do, so they "
        "cannot pick one of its calls; to edit one call only, select a module that runs once per call. "
        "(Warned once per block or handle.)"
    )
    return "yamltrace: " + str(SpecError([edit_issue(iv, message)]))
