"""One tensor of a spec's safetensors file, read into a tensor of its own: no memory map, no copy.

`safe_open(...).get_tensor` maps the file and copies the tensor out of the mapping, and checking the
values with one `isfinite` adds a mask of one byte per element: 1.8 to 2.8 times the tensor in memory
at once. Here the tensor is allocated once and the file's bytes are read into it, the values are
checked by their minimum and maximum (no mask), and the digest the load cache keeps (`TensorRead`) is taken of the same buffer, with
the file's identity (`file_identity`) as it was while it was read.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ._load_cache import TensorRead, file_identity, tensor_digest

__all__ = ["DTYPES", "all_finite", "read_tensor"]

# The safetensors dtypes a tensor value may have (floating point, as the activations it edits).
DTYPES = {"F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64}


def read_tensor(checked: Path, name: str, entry: Mapping[str, Any]) -> tuple[torch.Tensor, TensorRead]:
    """Tensor `name` of the checked safetensors file `checked`, whose header gives it `entry`, and what
    the load cache checks again of it. ValueError saying why the file cannot be read that way."""
    dtype = DTYPES[entry["dtype"]]
    shape, (start, end) = entry.get("shape"), entry["data_offsets"]
    if not (isinstance(shape, list) and all(isinstance(n, int) and n >= 0 for n in shape)):
        raise ValueError(f"its header gives tensor {name!r} the shape {shape!r}, not a list of sizes")
    size = math.prod(shape) * dtype.itemsize
    if size != end - start:
        raise ValueError(f"its header gives tensor {name!r} {end - start:,} bytes for {size:,} bytes of {shape} {entry['dtype']}")
    with open(checked, "rb", buffering=0) as file:
        before = os.fstat(file.fileno())
        length = int.from_bytes(file.read(8), "little")
        if 8 + length + end > before.st_size:
            raise ValueError(
                f"tensor {name!r} ends at byte {8 + length + end:,}, past the end of the file ({before.st_size:,} bytes)"
            )
        tensor = torch.empty(shape, dtype=dtype)
        data = memoryview(tensor.view(-1).view(torch.uint8).numpy().data) if size else memoryview(b"")
        file.seek(8 + length + start)
        done = 0
        while done < size:
            got = file.readinto(data[done:])
            if not got:
                raise ValueError(f"the file ended while tensor {name!r} was read")
            done += got
        after = os.fstat(file.fileno())
    identity = file_identity(before)
    same = identity == file_identity(after)  # else never trusted by identity: checked by content each time
    read = TensorRead(
        str(checked),
        os.path.realpath(checked),
        before.st_size,
        name,
        dict(entry),
        tensor_digest(data),
        identity if same else None,
    )
    return tensor, read


def all_finite(tensor: torch.Tensor) -> bool:
    """Whether every value is finite: the minimum and maximum are (both propagate NaN), one pass and no
    mask the size of the tensor."""
    if tensor.numel() == 0:
        return True
    low, high = torch.aminmax(tensor)
    return bool(torch.isfinite(low)) and bool(torch.isfinite(high))
