"""An activations folder's `index.json` and shard headers, checked before anything is read from them.

`open_activations` checks the whole index once when it opens the folder (every field `build_index`
writes: types, bounds, shard names under the folder rule, batches inside their shard), and each
shard's header against the index when the shard is first read (every tensor there, of the dtype and
row count the index says). A folder edited by hand or by someone else then fails with an error that
names the file and the entry, never a `KeyError` from deep inside a read or rows of another shard.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .._folder import bare_name, parse_json
from ._index import DTYPES, FORMAT, FORMAT_VERSION, INDEX_FILE, TEXTS_FIELD, ExtractError, tensor_name

__all__ = ["check_index", "check_shard_header", "text_columns", "shard_texts"]
_MAX_DIMS = 16  # dimensions of one stored row


def _fail(path: Path, where: str, message: str) -> ExtractError:
    return ExtractError(f"{path}: {where}: {message}; this is not an index `extract` wrote (edited or damaged): extract again")


def _count(value: Any, path: Path, where: str) -> int:
    """`value` when it is a non-negative integer (not a bool)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise _fail(path, where, f"expected a non-negative integer, got {value!r:.80}")
    return value


def _entries(value: Any, kind: type, path: Path, where: str) -> Any:
    if not isinstance(value, kind):
        raise _fail(path, where, f"expected {'an object' if kind is dict else 'a list'}, got {type(value).__name__}")
    return value


def _check_key(key: Any, entry: Any, path: Path) -> None:
    where = f"$.keys[{key!r:.80}]"
    if not isinstance(key, str) or not key:
        raise _fail(path, where, "a key must be a non-empty name")
    entry = _entries(entry, dict, path, where)
    layers = entry.get("layers")
    if layers is not None:
        for i, layer in enumerate(_entries(layers, list, path, f"{where}.layers")):
            if not isinstance(layer, int) or isinstance(layer, bool):
                raise _fail(path, f"{where}.layers[{i}]", f"expected a layer number, got {layer!r:.80}")
        if len(set(layers)) != len(layers):
            raise _fail(path, f"{where}.layers", "a layer is listed twice")
    shape = _entries(entry.get("row_shape"), list, path, f"{where}.row_shape")
    if len(shape) > _MAX_DIMS:
        raise _fail(path, f"{where}.row_shape", f"more than {_MAX_DIMS} dimensions")
    for i, size in enumerate(shape):
        _count(size, path, f"{where}.row_shape[{i}]")
    if not isinstance(entry.get("dtype"), str) or entry["dtype"] not in DTYPES:
        raise _fail(path, f"{where}.dtype", f"expected one of {', '.join(DTYPES)}, got {entry.get('dtype')!r:.80}")


def _check_batches(index: dict[str, Any], path: Path) -> None:
    shard_rows = [_count(_entries(s, dict, path, f"$.shards[{i}]").get("rows"), path, f"$.shards[{i}].rows")
                  for i, s in enumerate(index["shards"])]  # fmt: skip
    for i, shard in enumerate(index["shards"]):
        bare_name(shard.get("file"), what=f"{path}: $.shards[{i}].file")
    total, shards = 0, len(shard_rows)
    for i, batch in enumerate(_entries(index.get("batches"), list, path, "$.batches")):
        if type(batch) is not list or len(batch) != 3:
            raise _fail(path, f"$.batches[{i}]", "expected [shard, offset, rows]")
        shard, offset, rows = batch
        if type(shard) is not int or type(offset) is not int or type(rows) is not int or min(batch) < 0:
            for j, value in enumerate(batch):  # a bad batch only: name the value that is wrong
                _count(value, path, f"$.batches[{i}][{j}]")
        if shard >= shards:
            raise _fail(path, f"$.batches[{i}][0]", f"shard {shard} does not exist ({shards} shards listed)")
        if offset + rows > shard_rows[shard]:
            past = f"rows {offset}..{offset + rows} lie past the {shard_rows[shard]} rows of shard {shard}"
            raise _fail(path, f"$.batches[{i}]", past)
        total += rows
    if "rows" in index and _count(index["rows"], path, "$.rows") != total:
        raise _fail(path, "$.rows", f"{index['rows']} rows, but the batches hold {total}")


def check_index(index: Any, path: Path) -> dict[str, Any]:
    """`index` (parsed `index.json` at `path`) when it has the structure `build_index` writes; an ExtractError
    naming the file and the bad entry otherwise (a FolderError for a shard name that leaves the folder)."""
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        found = index.get("format") if isinstance(index, dict) else type(index).__name__
        raise ExtractError(f"{path} is not a yamltrace activation index (format {found!r:.80}).")
    if index.get("format_version", FORMAT_VERSION) != FORMAT_VERSION:
        raise ExtractError(
            f"{path}: $.format_version: version {index['format_version']!r:.80}, but this yamltrace reads version "
            f"{FORMAT_VERSION}; use the yamltrace that wrote it, or extract again"
        )
    for key, entry in _entries(index.get("keys"), dict, path, "$.keys").items():
        _check_key(key, entry, path)
    _entries(index.get("shards"), list, path, "$.shards")
    _check_batches(index, path)
    _check_sizes(index, path)
    _check_columns(index, path)
    return index


_MAX_TENSOR_BYTES = 2**63 - 1  # torch's sizes and strides are int64: a tensor of more bytes cannot exist


def _check_sizes(index: dict[str, Any], path: Path) -> None:
    """Every key's rows, all of them at once (what `get` of the whole key builds), fit in a tensor."""
    rows = max(1, sum(batch[2] for batch in index["batches"]))
    for key, entry in index["keys"].items():
        size = rows * math.prod(entry["row_shape"]) * DTYPES[entry["dtype"]].itemsize
        if size > _MAX_TENSOR_BYTES:
            raise _fail(
                path,
                f"$.keys[{key!r:.80}].row_shape",
                f"{rows} row(s) of shape {entry['row_shape']!r:.80} {entry['dtype']} are {size:.3g} bytes, more than a tensor "
                "can hold (2**63 - 1)",
            )


def _check_columns(index: dict[str, Any], path: Path) -> None:
    """The carried data columns: distinct names, each a stored input-like tensor (no layers) or a text column."""
    columns = _entries(index.get("columns", []), list, path, "$.columns")
    for i, name in enumerate(columns):
        if not isinstance(name, str) or not name or "/" in name:
            raise _fail(path, f"$.columns[{i}]", f"expected a column name, got {name!r:.80}")
        if name in index["keys"] and index["keys"][name]["layers"] is not None:
            raise _fail(path, f"$.columns[{i}]", f"{name!r} is a captured key with layers, not a column")
    if len(set(columns)) != len(columns):
        raise _fail(path, "$.columns", "a column is listed twice")


def text_columns(index: dict[str, Any]) -> list[str]:
    """The carried columns stored as text (in each shard's metadata): those that are not a stored tensor."""
    return [name for name in index.get("columns", []) if name not in index["keys"]]


def shard_texts(header: dict[str, Any], index: dict[str, Any], number: int, path: Path) -> dict[str, list[str]]:
    """The text columns of shard `number` (`header` is its safetensors header, already read under the folder
    rule): one string per row of the shard for each text column the index lists; an ExtractError otherwise."""
    names = text_columns(index)
    if not names:
        return {}
    rows = index["shards"][number]["rows"]
    field = (header.get("__metadata__") or {}).get(TEXTS_FIELD)
    texts = parse_json(field.encode("utf-8"), path, "shard's text columns") if isinstance(field, str) else None
    if not isinstance(texts, dict):
        raise ExtractError(f"{path}: holds no text columns, but {_index_of(path)} lists {names}; extract again")
    for name in names:
        values = texts.get(name)
        if not isinstance(values, list) or len(values) != rows or not all(isinstance(v, str) for v in values):
            raise ExtractError(
                f"{path}: text column {name!r} is not {rows} string(s), one per row of the shard, as "
                f"{_index_of(path)} says (shard {number}); extract again"
            )
    return {name: texts[name] for name in names}


def check_shard_header(header: dict[str, Any], index: dict[str, Any], number: int, path: Path) -> None:
    """That shard `number` (`header` is its safetensors header) holds every tensor the index lists, each
    of the index's dtype with the shard's row count; an ExtractError naming the shard and the tensor."""
    rows = index["shards"][number]["rows"]
    for key, entry in index["keys"].items():
        for layer in entry["layers"] if entry["layers"] is not None else [None]:
            name = tensor_name(key, layer)
            stored = header.get(name)
            if not isinstance(stored, dict):
                raise ExtractError(f"{path}: holds no tensor {name!r}, which {_index_of(path)} lists; extract again")
            expected = [rows, *entry["row_shape"]]
            if stored.get("dtype") != entry["dtype"] or stored.get("shape") != expected:
                raise ExtractError(
                    f"{path}: tensor {name!r} is {stored.get('dtype')!r:.20} of shape {stored.get('shape')!r:.80}, but "
                    f"{_index_of(path)} says {entry['dtype']} of shape {expected} (shard {number}); the shard does not "
                    "belong to this index: extract again"
                )


def _index_of(shard: Path) -> str:
    return str(shard.with_name(INDEX_FILE))
