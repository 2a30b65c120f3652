"""OutputRecorder and the normalisation of `_can_record_outputs` maps.

A capture map (`_can_record_outputs`) maps an output key to one recorder or a list of them, where a
recorder is a module class, a class-name string or an `OutputRecorder`. Everything downstream works on
the normalised form: a tuple of `(key, OutputRecorder)` tasks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Union

import torch
from torch import nn

from ._recorder_fields import CHECKED_FIELDS, RECORDER_FIELDS, default_index, field_default, positions_text_problem

__all__ = [
    "OutputRecorder",
    "RecorderLike",
    "CaptureMap",
    "CAPTURE_DTYPES",
    "normalize_output_map",
    "normalized_tasks",
    "default_index",
]


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
    """`OutputRecorder.positions` validated: a tuple of ints, a slice text such as `"-8:"`, `"last"` /
    `"first"` (each row's last / first real position, by the attention mask: `_padding`), or None.

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
        text: str = value.replace(" ", "")
        problem = positions_text_problem(text)  # the rule a spec's text is checked with
        if problem is not None:
            raise ValueError(f"OutputRecorder.positions: {problem}.")
        return text
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,)
    if isinstance(value, Sequence) and value and all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        return tuple(value)
    raise TypeError(
        f"OutputRecorder.positions must be a non-empty list of ints, a slice text such as '-8:', or 'last' / 'first', got {value!r}."
    )


# The dtypes a capture may be cast to, by the name a spec writes.
CAPTURE_DTYPES: Mapping[str, torch.dtype] = MappingProxyType(
    {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64}
)


@dataclass(frozen=True)
class OutputRecorder:
    """Which submodule outputs to record for one output key.

    Attributes:
        target_class: hook every module that is an instance of this class, or of any class of this
            tuple (transformers' `isinstance` rule; a list is stored as a tuple).
        index: the element of a tuple output to record (a non-tuple output is recorded whole).
        layer_name: extra filter on the module's dotted path: `"." + layer_name + "."` must occur in
            `path + "."`, so `"attn"` matches `h.0.attn` but not `h.0.crossattention`.
        class_name: alternative to `target_class`: matches a module whose dotted path relative to the
            model (with a leading dot, e.g. `.layers.0.self_attn`) ends with this string.
        capture_initial_hidden_state: for `hidden_states`, prepend the input of the first hooked module.
        num_hidden_layers_key: the config attribute that counts layers, for negative layer indices.
        layers: positions to keep (negative allowed); `None` keeps every position. Unselected
            positions hold `None`, so nothing is retained for them.
        detach: record captured tensors detached from the autograd graph.
        to: record captured tensors moved to this device (`"cpu"`, `"cuda:0"`, ...).
        dtype: record captured tensors cast to this floating dtype (a `torch.dtype` or its name in
            `CAPTURE_DTYPES`, stored as the `torch.dtype`).
        input: record an argument of the module's forward instead of its output: a positional index
            or a keyword name (`index` and `capture_initial_hidden_state` then do not apply).
        positions: token positions to keep along `seq_dim`: ints (negative allowed; one int or a
            list) or a slice text such as `"-8:"` (a `slice` is stored as its text). Only the kept
            positions are retained: the selection is copied out of the module's tensor.
        seq_dim: the sequence dimension `positions` selects along (default 1: `[batch, seq, ...]`).
        optional: the modules it hooks exist only in some configurations (cross-attention, an
            optional tower): matching no module is not an error for a strict `trace`.
        mask: the argument of the root forward (the traced module's, or the decorated forward's)
            holding the `[batch, seq]` attention mask that `positions="last"` / `"first"` and the
            padding check of literal positions read; None reads `attention_mask`.

    Without `detach`, `to`, `dtype` and `positions`, a capture is the very tensor the module returned
    (a reference, no copy); each option applies to tensors only, after `layers` selection.
    """

    # Defaults from the one table of recorder fields (`yamltrace._recorder_fields.RECORDER_FIELDS`).
    target_class: type[nn.Module] | tuple[type[nn.Module], ...] | None = None
    index: int = field_default("index")
    layer_name: str | None = None
    class_name: str | None = None
    capture_initial_hidden_state: bool = field_default("capture_initial_hidden_state")
    num_hidden_layers_key: str = field_default("num_hidden_layers_key")
    layers: tuple[int, ...] | None = None
    detach: bool = field_default("detach")
    to: str | None = None
    dtype: torch.dtype | None = None
    input: int | str | None = None
    positions: tuple[int, ...] | str | None = None
    seq_dim: int = field_default("seq_dim")
    optional: bool = field_default("optional")
    mask: str | None = None

    def __post_init__(self) -> None:
        if self.target_class is None and self.class_name is None:
            raise ValueError("OutputRecorder needs a target_class or a class_name to know which modules to hook.")
        object.__setattr__(self, "target_class", _target(self.target_class))
        if not isinstance(self.index, int) or isinstance(self.index, bool):
            raise TypeError(f"OutputRecorder.index must be an int, got {self.index!r}.")
        if self.layers is not None:
            layers = tuple(self.layers)
            if not all(isinstance(i, int) and not isinstance(i, bool) for i in layers):
                raise TypeError(f"OutputRecorder.layers must be a sequence of ints, got {self.layers!r}.")
            object.__setattr__(self, "layers", layers)
        for flag in ("detach", "optional"):
            if not isinstance(getattr(self, flag), bool):
                raise TypeError(f"OutputRecorder.{flag} must be a bool, got {getattr(self, flag)!r}.")
        if self.to is not None:
            object.__setattr__(self, "to", _device_name(self.to))
        if self.dtype is not None:
            object.__setattr__(self, "dtype", _capture_dtype(self.dtype))
        object.__setattr__(self, "input", normalize_input(self.input))
        object.__setattr__(self, "positions", normalize_positions(self.positions))
        if self.mask is not None and not isinstance(self.mask, str):
            raise TypeError(f"OutputRecorder.mask must be the name of the root forward's mask argument, got {self.mask!r}.")
        if self.mask is not None and self.positions is None:
            raise ValueError(
                "OutputRecorder.mask names the attention mask that positions read, and this recorder keeps every "
                "position; set positions (last, first, or literal ones) or remove mask."
            )
        if not isinstance(self.seq_dim, int) or isinstance(self.seq_dim, bool):
            raise TypeError(f"OutputRecorder.seq_dim must be an int, got {self.seq_dim!r}.")
        for field in CHECKED_FIELDS:  # the checks a spec's values get (`validate`), for every recorder
            value = getattr(self, field.name)
            for _, message in () if value is None else field.check(value):
                raise ValueError(f"OutputRecorder.{field.name}: {message}.")

    def __hash__(self) -> int:
        # Equal recorders hash equal: a hash of the fields that tell most recorders apart, not of all
        # fifteen (a capture map is hashed on every capturing forward and block: `normalized_tasks`).
        return hash((self.target_class, self.class_name, self.index))

    @property
    def target_classes(self) -> tuple[type[nn.Module], ...]:
        """The classes whose instances it hooks (one, several, or none for a `class_name` recorder)."""
        target = self.target_class
        return () if target is None else target if isinstance(target, tuple) else (target,)

    def matcher(self) -> Callable[[nn.Module, str], bool]:
        """`matches` as a function of `(module, path)`; for a recorder with a target class only (the
        common case, tested on every module a plan walks), an `isinstance` test without the rest."""
        if self.class_name is None and self.layer_name is None:
            target = self.target_class
            return lambda module, path: isinstance(module, target)  # type: ignore[arg-type]
        return self.matches

    def matches(self, module: nn.Module, path: str) -> bool:
        """Whether `module`, found at dotted `path` (leading dot, `""` for the root), is hooked."""
        by_class = self.target_class is not None and isinstance(module, self.target_class)
        by_path = self.class_name is not None and path.endswith(self.class_name)
        if not (by_class or by_path):
            return False
        if self.layer_name is None:
            return True
        return "." + self.layer_name.strip(".") + "." in path + "."


def _target(target: Any) -> type[nn.Module] | tuple[type[nn.Module], ...] | None:
    """`target_class` as stored: None, a class, or a non-empty tuple of classes (a list becomes one)."""
    if target is None or isinstance(target, type):
        return target
    if isinstance(target, (tuple, list)) and target and all(isinstance(t, type) for t in target):
        return tuple(target)
    raise TypeError(f"OutputRecorder.target_class must be a class or a non-empty tuple of classes, got {target!r}.")


def _device_name(device: Any) -> str:
    """`device` (text or `torch.device`) as the text torch writes it; ValueError if torch rejects it."""
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"OutputRecorder.to must be a device string such as 'cpu' or 'cuda:0', got {device!r}.")
    try:
        return str(torch.device(device))
    except RuntimeError as e:
        raise ValueError(f"OutputRecorder.to: {device!r} is not a device ({e}).") from e


def _capture_dtype(dtype: Any) -> torch.dtype:
    """`dtype` (a `torch.dtype` or its name) if it is one of `CAPTURE_DTYPES`, else ValueError."""
    allowed = CAPTURE_DTYPES.get(dtype) if isinstance(dtype, str) else dtype
    if allowed is None or allowed not in CAPTURE_DTYPES.values():
        raise ValueError(f"OutputRecorder.dtype must be one of {', '.join(CAPTURE_DTYPES)}, got {dtype!r}.")
    return allowed


RecorderLike = Union[OutputRecorder, type, str]
CaptureMap = Mapping[str, Union[RecorderLike, Sequence[RecorderLike]]]


def _as_recorder(key: str, recorder: Any) -> OutputRecorder:
    if isinstance(recorder, OutputRecorder):
        return recorder
    if isinstance(recorder, str):
        return OutputRecorder(class_name=recorder, index=default_index(key))
    if isinstance(recorder, type):
        return OutputRecorder(target_class=recorder, index=default_index(key))
    if hasattr(recorder, "target_class") and hasattr(recorder, "index"):
        # An OutputRecorder from another library with the same fields (transformers'): the fields it
        # has, the defaults for the others.
        return OutputRecorder(**{f.name: getattr(recorder, f.name, f.default) for f in RECORDER_FIELDS})
    raise TypeError(
        f"Output {key!r}: a recorder must be an OutputRecorder, a module class or a class-name string, got {recorder!r}."
    )


def normalized_tasks(output_map: CaptureMap | None) -> tuple[tuple[str, OutputRecorder], ...]:
    """`normalize_output_map(output_map)`, memoised on the map's current content.

    A capture normalises its model's map on every capturing forward; equal content (the same
    classes, recorders and names, in the same order) gives the very same tuple of tasks back,
    without building recorders again. A map edited in place is seen at once.
    """
    if not output_map:
        return ()
    snapshot = tuple(output_map.items())  # a map of classes, names and recorders: hashable as it is
    try:
        tasks = _NORMALIZED.get(snapshot)
    except TypeError:  # a list of recorders (as a tuple, the same tasks), or an unhashable value
        snapshot = tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in output_map.items())
        try:
            tasks = _NORMALIZED.get(snapshot)
        except TypeError:  # normalise it each time (and raise the usual errors)
            return normalize_output_map(output_map)
    if tasks is None:
        if len(_NORMALIZED) >= _NORMALIZED_MAX:
            _NORMALIZED.clear()
        tasks = _NORMALIZED[snapshot] = normalize_output_map(output_map)
    return tasks


# normalized_tasks' memo (a plain dict: torch.compile traces it without warnings, unlike lru_cache).
_NORMALIZED: dict[tuple[Any, ...], tuple[tuple[str, OutputRecorder], ...]] = {}
_NORMALIZED_MAX = 256


def normalize_output_map(output_map: CaptureMap | None) -> tuple[tuple[str, OutputRecorder], ...]:
    """Flatten a capture map into `(key, OutputRecorder)` tasks, bare classes/names given default indices."""
    tasks: list[tuple[str, OutputRecorder]] = []
    for key, recorders in (output_map or {}).items():
        listed = recorders if isinstance(recorders, (list, tuple)) else [recorders]
        tasks.extend((key, _as_recorder(key, r)) for r in listed)
    return tuple(tasks)
