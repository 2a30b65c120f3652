"""The fields of a recorder, defined once: attribute, spec key, YAML types, default, check, how written.

`OutputRecorder` (engine) takes its defaults from here, the spec layer reads recorder mappings with
it (`spec/_resolve`), checks their values before anything loads (`spec/_limits`) and writes them back
(`Spec.to_yaml`); a test holds the JSON Schema's recorder properties equal to `RECORDER_FIELDS`.
Plain data: this module imports neither torch nor jsonschema, so `validate` can use it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

__all__ = [
    "CHECKED_FIELDS",
    "EDIT_FIELDS",
    "MAX_POSITION",
    "MAX_RECORDER_INDEX",
    "MAX_SEQ_DIM",
    "PADDING_POSITIONS",
    "RECORDER_FIELDS",
    "RecorderField",
    "default_index",
    "field_default",
    "positions_text_problem",
    "slice_problem",
]

MAX_RECORDER_INDEX = 1 << 16  # |index|, |layers[i]| and input positions of a recorder
MAX_POSITION = 1 << 31  # |token position| (and slice bound or step): longer than any sequence a model takes
MAX_SEQ_DIM = 64  # |seq_dim|: torch tensors have fewer dimensions
# The padding-aware `positions`: each row's last (first) position that the attention mask marks real.
PADDING_POSITIONS = ("last", "first")

# A slice written as text: "start:stop" or "start:stop:step", each part an optional integer; nothing
# else (no spaces, no line break before the end: `\Z`, not `$`).
_SLICE = re.compile(r"(-?[0-9]+)?:(-?[0-9]+)?(?::(-?[0-9]+)?)?\Z")
# A config attribute name: an identifier that is not private or a dunder, and not a config method.
_CONFIG_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
_CONFIG_METHODS = frozenset(
    {
        "to_dict", "to_json_string", "to_json_file", "to_diff_dict", "save_pretrained", "from_pretrained",
        "from_dict", "from_json_file", "get_config_dict", "update", "load", "save", "get", "keys", "values", "items",
    }
)  # fmt: skip

Problems = Iterator[tuple[tuple[str | int, ...], str]]


class RecorderField(NamedTuple):
    """One recorder field: the `OutputRecorder` attribute `name`, its `key` in a spec's recorder mapping,
    the Python types its YAML value may have, its default, `check` (the problems of a YAML value of the
    right type, each with a path below the field) and `write` (an attribute value as YAML data)."""

    name: str
    key: str
    types: tuple[type, ...]
    default: Any
    check: Callable[[Any], Problems]
    write: Callable[[Any], Any]


def _none(value: Any) -> Problems:
    return iter(())


def _same(value: Any) -> Any:
    return value


def _in_range(value: int, limit: int) -> bool:
    return -limit <= value <= limit


def _index(value: int) -> Problems:
    if not _in_range(value, MAX_RECORDER_INDEX):
        yield (), f"index {value} is out of range; use -{MAX_RECORDER_INDEX} .. {MAX_RECORDER_INDEX}"


def _layers(value: list[Any]) -> Problems:
    for i, layer in enumerate(value):
        if isinstance(layer, int) and not _in_range(layer, MAX_RECORDER_INDEX):
            yield (i,), f"layer {layer} is out of range; use -{MAX_RECORDER_INDEX} .. {MAX_RECORDER_INDEX}"


def _config_key(value: str) -> Problems:
    if not _CONFIG_KEY.match(value) or value in _CONFIG_METHODS:
        yield (
            (),
            (
                f"{value!r} is not a config attribute that counts layers: write a public attribute name such as "
                "num_hidden_layers or n_layer (no leading _, not a method)"
            ),
        )


def _layer_name(value: str) -> Problems:
    if not value.strip("."):
        yield (), f"layer_name {value!r} names no path component (dots are stripped); write one such as self_attn"


def _input(value: int | str) -> Problems:
    if isinstance(value, int) and value > MAX_RECORDER_INDEX:
        yield (), f"input {value} is out of range; a positional index is 0 .. {MAX_RECORDER_INDEX}"


def slice_problem(text: str) -> str | None:
    """Why `text` is not a slice a capture can take (`start:stop[:step]`, bounded, positive step), or None."""
    shown = repr(text) if len(text) <= 40 else repr(text[:37] + "...")
    match = _SLICE.match(text)
    if match is None:
        return f"{shown} is not a slice; write it like '-8:', ':4' or '0:10:2' (no spaces)"
    parts = [None if part is None else int(part) if len(part) <= 19 else MAX_POSITION + 1 for part in match.groups()]
    if any(part is not None and not _in_range(part, MAX_POSITION) for part in parts):
        return f"the bounds and step of slice {shown} must lie in -{MAX_POSITION} .. {MAX_POSITION}"
    if parts[2] is not None and parts[2] <= 0:
        return f"the step of slice {shown} must be positive"
    return None


def positions_text_problem(text: str) -> str | None:
    """Why `text` is neither a padding-aware position (`last`, `first`) nor a slice a capture can take, or None."""
    if text in PADDING_POSITIONS:
        return None
    if ":" not in text and len(text) <= 40:
        return (
            f"{text!r} is not a slice, nor last or first; write last or first (each row's last or first position "
            "that the attention mask marks real), or a slice like '-8:'"
        )
    return slice_problem(text)


def _positions(value: list[Any] | str) -> Problems:
    if isinstance(value, str):
        problem = positions_text_problem(value)
        if problem is not None:
            yield (), problem
        return
    for i, position in enumerate(value):
        if isinstance(position, int) and not _in_range(position, MAX_POSITION):
            yield (i,), f"position {position} is out of range; use -{MAX_POSITION} .. {MAX_POSITION}"


def _seq_dim(value: int) -> Problems:
    if not -MAX_SEQ_DIM <= value < MAX_SEQ_DIM:
        yield (), f"seq_dim {value} is no tensor dimension; use -{MAX_SEQ_DIM} .. {MAX_SEQ_DIM - 1}"


def _mask(value: str) -> Problems:
    if not value.isidentifier():
        yield (), f"mask {value!r} is not an argument name; write the root forward's argument, such as attention_mask"


def _positions_data(value: tuple[int, ...] | str) -> list[int] | str:
    return value if isinstance(value, str) else list(value)


def _dtype_name(value: Any) -> str:
    return str(value).removeprefix("torch.")  # torch.float16 -> float16, the name a spec writes


# In `OutputRecorder`'s order. `target` is written by the spec layer (class references, which need
# its registry) and `index`'s default in a spec depends on the key (`default_index`).
RECORDER_FIELDS: tuple[RecorderField, ...] = (
    RecorderField("target_class", "target", (str, list), None, _none, _same),
    RecorderField("index", "index", (int,), 0, _index, _same),
    RecorderField("layer_name", "layer_name", (str,), None, _layer_name, _same),
    RecorderField("class_name", "class_name", (str,), None, _none, _same),
    RecorderField("capture_initial_hidden_state", "capture_initial_hidden_state", (bool,), True, _none, _same),
    RecorderField("num_hidden_layers_key", "num_hidden_layers_key", (str,), "num_hidden_layers", _config_key, _same),
    RecorderField("layers", "layers", (list,), None, _layers, list),
    RecorderField("detach", "detach", (bool,), False, _none, _same),
    RecorderField("to", "to", (str,), None, _none, _same),
    RecorderField("dtype", "dtype", (str,), None, _none, _dtype_name),
    RecorderField("input", "input", (int, str), None, _input, _same),
    RecorderField("positions", "positions", (list, str), None, _positions, _positions_data),
    RecorderField("seq_dim", "seq_dim", (int,), 1, _seq_dim, _same),
    RecorderField("optional", "optional", (bool,), False, _none, _same),
    RecorderField("mask", "mask", (str,), None, _mask, _same),
)

_BY_NAME: Mapping[str, RecorderField] = {f.name: f for f in RECORDER_FIELDS}
# The fields whose values have a check beyond their type (what `OutputRecorder` runs on construction).
CHECKED_FIELDS: tuple[RecorderField, ...] = tuple(f for f in RECORDER_FIELDS if f.check is not _none)


# The fields an intervention selects with (docs/interventions.md). The others only shape what a capture
# keeps (detach, to, dtype), excuse a recorder that matches nothing (optional; `intervene(strict=False)`
# is the edits' leniency) or add the initial hidden state to a capture. `mask` names the attention mask
# of the padding-aware positions (`PADDING_POSITIONS`), for edits as for captures.
EDIT_FIELDS: tuple[RecorderField, ...] = tuple(
    f for f in RECORDER_FIELDS if f.name not in {"capture_initial_hidden_state", "detach", "to", "dtype", "optional"}
)


def field_default(name: str) -> Any:
    """The default of the recorder field `name` (an `OutputRecorder` attribute)."""
    return _BY_NAME[name].default


def default_index(key: str) -> int:
    """The tuple index a bare class or name records: 0 for hidden-state keys, 1 for the others."""
    return 0 if "hidden_states" in key else 1
