"""`--values FILE.safetensors`: the tensors of a spec's `{value: NAME}` interventions, read from a file.

A tensor named `NAME` is the value of `{value: NAME}` for every module the intervention edits; tensors
`NAME.0`, `NAME.1`, ... (numbered from 0, none missing) give one tensor per module, in module order, as
`values={NAME: [t0, t1, ...]}` does. The file is read as a spec's tensor files are (`_folder`: a regular
file, no link out of its folder, its size and header capped), with safetensors only: it holds no code.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .._folder import folder_file, safetensors_header
from ..errors import FolderError
from ..spec._limits import MAX_TENSOR_FILE_BYTES, MAX_TENSOR_HEADER_BYTES
from ._common import _Usage

__all__ = ["read_values", "WHAT"]

WHAT = "values file"
# A module number: at most 9 digits (no model has a billion modules; `int()` of a longer one may exceed
# Python's digit limit). A longer digit run is part of a plain name, which the spec then does not take.
_NUMBERED = re.compile(r"(.+)\.(0|[1-9][0-9]{0,8})")


def read_values(path: str | None, needed: tuple[str, ...]) -> dict[str, Any] | None:
    """`values=` for `extract`, from the file `path` (None when neither the file nor the spec has values).
    `_Usage` naming the file and the name when the spec takes a name the file lacks, or the file holds a
    tensor the spec does not take; `FolderError` when the file is unsafe or unreadable."""
    if path is None:
        if needed:
            names = ", ".join(needed)
            raise _Usage(
                f"the spec's interventions take {{value: NAME}} for {names}: give --values FILE.safetensors holding them."
            )
        return None
    tensors = _read(Path(path))
    values = _grouped(path, tensors)
    missing = [name for name in needed if name not in values]
    if missing:
        raise _Usage(
            f"--values {path}: no tensor {missing[0]!r} (nor {missing[0]}.0, {missing[0]}.1, ...), which the spec's "
            f"intervention {{value: {missing[0]}}} takes; it holds: {', '.join(tensors) or 'no tensors'}."
        )
    unknown = [name for name in values if name not in needed]
    if unknown:
        taken = ", ".join(needed) or "no {value: NAME}"
        raise _Usage(
            f"--values {path}: tensor {_shown(unknown[0], tensors)!r:.80} is not a {{value: NAME}} of the spec's interventions "
            f"(they take: {taken}); remove it from the file or name it in the spec."
        )
    return values


def _read(path: Path) -> dict[str, Any]:
    """Every tensor of the safetensors file `path`, in file order, under the untrusted-folder rule."""
    from safetensors import SafetensorError, safe_open

    folder, name = path.parent, path.name
    checked = folder_file(folder, name, what=WHAT)
    size = checked.stat().st_size
    if size > MAX_TENSOR_FILE_BYTES:
        raise FolderError(
            f"{checked}: the {WHAT} is {size:,} bytes, over the {MAX_TENSOR_FILE_BYTES:,}-byte limit (MAX_TENSOR_FILE_BYTES); "
            "keep only the tensors the spec takes in it"
        )
    names = [
        n for n in safetensors_header(folder, name, what=WHAT, max_header_bytes=MAX_TENSOR_HEADER_BYTES) if n != "__metadata__"
    ]
    try:
        with safe_open(str(checked), framework="pt") as f:
            return {n: f.get_tensor(n) for n in names}
    except (SafetensorError, OSError, RuntimeError, ValueError) as e:
        raise FolderError(f"{checked}: cannot read the {WHAT} ({e}); it is not a safetensors file yamltrace can read") from None


def _grouped(path: str, tensors: dict[str, Any]) -> dict[str, Any]:
    """`{NAME: tensor}` for plain names, `{NAME: [NAME.0, NAME.1, ...]}` for numbered ones."""
    values: dict[str, Any] = {}
    numbered: dict[str, dict[int, Any]] = {}
    for name, tensor in tensors.items():
        match = _NUMBERED.fullmatch(name)
        if match is None:
            values[name] = tensor
        else:
            numbered.setdefault(match[1], {})[int(match[2])] = tensor
    for name, parts in numbered.items():
        if name in values:
            raise _Usage(
                f"--values {path}: holds both {name!r} and {name}.0, ...; give one tensor for all modules or one per module."
            )
        gap = next(i for i in range(len(parts) + 1) if i not in parts)
        if gap != len(parts):
            raise _Usage(f"--values {path}: {name}.{gap} is missing; number the tensors of {name!r} from 0, one per module.")
        values[name] = [parts[i] for i in range(len(parts))]
    return values


def _shown(name: str, tensors: dict[str, Any]) -> str:
    """How a value name appears in the file: itself, or its first numbered tensor."""
    return name if name in tensors else f"{name}.0"
