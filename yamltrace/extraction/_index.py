"""The on-disk layout of an extraction: shard names, what each shard says about itself, `index.json`.

A directory holds `shard-r<rank>-<seq>.safetensors` files and, once every process has finished,
`index.json`. Each shard is self-describing: its safetensors metadata names the run it belongs to
(a fingerprint of the spec, model, world size and shard size) and the batches it holds, in order.
So both `resume` (which batches are done) and the index (row order over every rank's shards) are
read back from the shards themselves; nothing else needs to survive a crash.

A tensor is stored as `<key>/<layer>` for a captured key (one tensor per kept layer) and as `<name>`
for a model input kept beside the activations (`input_ids`, `attention_mask`) or a data column carried
with them (`labels`); dimension 0 is rows. A column of text (`id`) is stored in the shard's metadata
instead, one JSON list of strings per column (`TEXTS_FIELD`); the index lists every carried column.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .._folder import safetensors_header
from ..errors import ExtractError

__all__ = [
    "ExtractError",
    "DTYPES",
    "dtype_code",
    "INDEX_FILE",
    "MAX_INDEX_BYTES",
    "FORMAT",
    "ShardInfo",
    "shard_name",
    "temporary_prefix",
    "create_temporary",
    "TEMPORARY_SUFFIX",
    "tensor_name",
    "split_tensor_name",
    "TEXTS_FIELD",
    "fingerprint",
    "run_parts",
    "run_differences",
    "read_shards",
    "build_index",
    "write_json_atomically",
    "fsync_directory",
]

INDEX_FILE = "index.json"
MAX_INDEX_BYTES = 64 * 2**20  # an index.json past this size is not one yamltrace wrote (about 2 million batches)
FORMAT = "yamltrace-activations"
FORMAT_VERSION = 1
_SHARD = re.compile(r"shard-r(\d{3,})-(\d{5,})\.safetensors")
TEMPORARY_SUFFIX = ".tmp"
RUN_FIELD, BATCHES_FIELD, KEYS_FIELD = "yamltrace.run", "yamltrace.batches", "yamltrace.keys"
PARTS_FIELD = "yamltrace.run_parts"  # {part of the run: short hash}: what tells another run's shard apart
TEXTS_FIELD = "yamltrace.texts"  # {column: [one string per row]} of a shard's text columns, as JSON


# safetensors' dtype codes, as its headers write them.
DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool,
}  # fmt: skip
_CODES = {dtype: code for code, dtype in DTYPES.items()}


def dtype_code(dtype: torch.dtype) -> str:
    """The safetensors code of `dtype` (`F32`, ...); ExtractError for a dtype the format cannot hold."""
    try:
        return _CODES[dtype]
    except KeyError:
        raise ExtractError(f"cannot store tensors of dtype {dtype} in safetensors shards; cast them (recorder dtype:).") from None


def shard_name(rank: int, seq: int) -> str:
    return f"shard-r{rank:03d}-{seq:05d}.safetensors"


def temporary_prefix(name: str) -> str:
    """How the temporaries of file `name` begin (hidden, never matched as a shard); see `create_temporary`."""
    return f".{name}."


def create_temporary(directory: Path, name: str) -> tuple[int, Path]:
    """A new, empty temporary file for `name` in `directory`, opened for writing: `(descriptor, path)`.

    It is created exclusively (`O_EXCL`, `O_NOFOLLOW`) under a random name, so a planted file or link
    of any name is never written through; it is renamed over `name` once whole.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    while True:
        path = directory / f"{temporary_prefix(name)}{secrets.token_hex(6)}{TEMPORARY_SUFFIX}"
        try:
            return os.open(path, flags, 0o644), path
        except FileExistsError:
            continue


@functools.lru_cache(maxsize=4096)  # (extract names each capture of each batch: a C-level lookup, not a call)
def tensor_name(key: str, layer: int | None) -> str:
    """The stored name of a key's capture: `key/layer`, or `key` for a value that is not per layer."""
    return key if layer is None else f"{key}/{layer}"


def split_tensor_name(name: str) -> tuple[str, int | None]:
    key, sep, layer = name.rpartition("/")
    return (key, int(layer)) if sep else (name, None)


def fingerprint(run: Mapping[str, Any]) -> str:
    """A stable hash of what makes two runs the same run (the index's `run` section)."""
    return hashlib.sha256(json.dumps(run, sort_keys=True, default=str).encode()).hexdigest()


# How a message names a part of a run (`run_parts`); a part not listed is named by its key.
_PART_NAMES = {
    "spec": "spec",
    "outputs": "outputs (--outputs)",
    "model.class": "model class",
    "model.config_sha256": "model config",
    "model.weights_sha256": "model weights",
    "inputs": "stored model inputs",
    "data": "data",
    "data.data": "data file",
    "data.bytes": "data file's content",
    "data.sha256": "data file's content",
    "data.tokenizer": "tokenizer",
    "data.tokenizer_sha256": "tokenizer",
    "data.max_length": "max length (--max-length)",
    "data.batch_size": "batch size (--batch-size)",
    "data.seed": "seed (--seed)",
    "world_size": "number of processes",
    "shard_bytes": "shard size (--shard-mb)",
    "columns": "columns (--columns)",
    "edit_values_sha256": "intervention values (--values)",
}


def run_parts(run: Mapping[str, Any]) -> dict[str, str]:
    """A short hash of each part of a run: each field, and each field of its `model` and `data` descriptions."""
    parts = {}
    for key, value in run.items():
        split = key in ("model", "data") and isinstance(value, Mapping)
        for name, part in value.items() if split else [(None, value)]:
            text = json.dumps(part, sort_keys=True, default=str).encode()
            parts[key if name is None else f"{key}.{name}"] = hashlib.sha256(text).hexdigest()[:16]
    return parts


def run_differences(parts: Mapping[str, str], found: Mapping[str, str]) -> str:
    """`its spec, seed (--seed) differ from this run's` (one part: `differs`) for the parts that differ, or "" when `found` is empty
    (shards written before parts were recorded) or nothing differs."""
    if not found:
        return ""
    names = dict.fromkeys(_PART_NAMES.get(k, k) for k in sorted(set(parts) | set(found)) if parts.get(k) != found.get(k))
    if not names:
        return ""
    return f"its {', '.join(names)} {'differs' if len(names) == 1 else 'differ'} from this run's"


@dataclass(frozen=True)
class ShardInfo:
    """One finished shard, as its header says: its run, its batches `(batch index, rows)`, its tensors."""

    path: Path
    rank: int
    seq: int
    run: str
    batches: tuple[tuple[int, int], ...]
    tensors: Mapping[str, tuple[tuple[int, ...], str]]  # name -> (shape, safetensors dtype), in stored order
    parts: Mapping[str, str] = field(default_factory=dict)  # the run's parts (`run_parts`), when recorded

    @property
    def rows(self) -> int:
        return sum(rows for _, rows in self.batches)


def _read_shard(path: Path, rank: int, seq: int) -> ShardInfo:
    """What shard `path` says about itself; read under the folder rule (a FIFO or a link out is refused)."""
    from safetensors import SafetensorError, safe_open

    safetensors_header(path.parent, path.name, what="activation shard")  # regular file, header capped
    try:
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
            tensors = {}
            for name in json.loads(metadata[KEYS_FIELD]):
                piece = f.get_slice(name)
                tensors[name] = (tuple(piece.get_shape()), piece.get_dtype())
        batches = tuple((int(b), int(r)) for b, r in json.loads(metadata[BATCHES_FIELD]))
        run = metadata[RUN_FIELD]
        parts = json.loads(metadata.get(PARTS_FIELD, "{}"))
        if not isinstance(parts, dict):
            raise ValueError(f"{PARTS_FIELD} is not an object")
    except (OSError, KeyError, ValueError, TypeError, RecursionError, SafetensorError) as e:
        raise ExtractError(f"{path}: not a yamltrace activation shard ({type(e).__name__}: {e}).") from e
    return ShardInfo(path, rank, seq, run, batches, tensors, {str(k): str(v) for k, v in parts.items()})


def read_shards(directory: Path, *, rank: int | None = None) -> list[ShardInfo]:
    """The finished shards in `directory` (of one rank, or all), ordered by rank then sequence number."""
    found = []
    for entry in os.scandir(directory):
        match = _SHARD.fullmatch(entry.name)
        if match and (rank is None or int(match[1]) == rank):
            found.append((int(match[1]), int(match[2]), Path(entry.path)))
    return [_read_shard(path, r, s) for r, s, path in sorted(found)]


def _row_layout(shards: Iterable[ShardInfo]) -> dict[str, dict[str, Any]]:
    """Per stored key: its layers, the shape of one row and the dtype, the same in every shard."""
    layout: dict[str, dict[str, Any]] = {}
    first: dict[str, tuple[tuple[int, ...], str, Path]] = {}
    names: tuple[set[str], Path] | None = None
    for shard in shards:
        names = names or (set(shard.tensors), shard.path)
        if set(shard.tensors) != names[0]:
            raise ExtractError(
                f"{shard.path.name} holds tensors {sorted(shard.tensors)} but {names[1].name} holds {sorted(names[0])}."
            )
        for name, (shape, dtype) in shard.tensors.items():
            seen = first.setdefault(name, (shape[1:], dtype, shard.path))
            if seen[:2] != (shape[1:], dtype):
                raise ExtractError(
                    f"{name}: rows of shape {list(shape[1:])} ({dtype}) in {shard.path.name} but {list(seen[0])} "
                    f"({seen[1]}) in {seen[2].name}; every batch must give rows of one shape (pad to one length)."
                )
            key, layer = split_tensor_name(name)
            entry = layout.setdefault(
                key, {"layers": None if layer is None else [], "row_shape": list(shape[1:]), "dtype": dtype}
            )
            if layer is not None:
                entry["layers"] = sorted({*entry["layers"], layer})
    return layout


def build_index(directory: Path, run: Mapping[str, Any], batch_count: int) -> dict[str, Any]:
    """The index of a finished run: every shard of the run, and where each batch's rows are, in order.

    `batch_count` is how many batches the input held; each must be in exactly one shard.
    """
    shards = read_shards(directory)
    expected = fingerprint(run)
    foreign = [s.path.name for s in shards if s.run != expected]
    if foreign:
        raise ExtractError(f"{directory} holds shards of another run ({', '.join(foreign[:3])}); use an empty directory.")
    where: dict[int, list[int]] = {}
    for number, shard in enumerate(shards):
        offset = 0
        for batch, rows in shard.batches:
            if batch in where:
                raise ExtractError(f"batch {batch} is in two shards: {shards[where[batch][0]].path.name} and {shard.path.name}.")
            where[batch] = [number, offset, rows]
            offset += rows
    missing = sorted(set(range(batch_count)) - set(where))
    if missing or len(where) != batch_count:
        raise ExtractError(
            f"{directory}: the shards hold {len(where)} of {batch_count} batches (missing: {missing[:10]}). With several "
            "processes, every rank must write to one shared directory."
        )
    columns = list(run.get("columns", ()))
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "rows": sum(rows for _, _, rows in where.values()),
        "keys": _row_layout(shards),
        **({"columns": columns} if columns else {}),
        "shards": [{"file": s.path.name, "rows": s.rows} for s in shards],
        "batches": [where[b] for b in range(batch_count)],
        "run": dict(run),
        "fingerprint": expected,
    }


def fsync_directory(directory: Path) -> None:
    """Make a rename in `directory` durable (a no-op where directories cannot be opened, e.g. Windows)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_json_atomically(path: Path, document: Mapping[str, Any]) -> None:
    """Write `document` to `path` through a new temporary file renamed over it (a link at `path` is replaced,
    never followed); ExtractError when the disk refuses it, with the temporary removed."""
    fd, temporary = create_temporary(path.parent, path.name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(document, indent=1, sort_keys=False) + "\n")  # one write, not one per JSON token
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException as e:
        temporary.unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise ExtractError(
                f"{path}: cannot write it ({e.strerror or e}); free some space, then run the same command again."
            ) from e
        raise
    fsync_directory(path.parent)
