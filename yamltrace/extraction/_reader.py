"""`open_activations`: lazy, memory-mapped reading of an extraction by key, layer and row range.

Only `index.json` is read when the directory is opened; `len`, keys, layers, shapes and dtypes come
from it. A read opens the shards it needs with safetensors' `safe_open` (memory-mapped) and copies
out just the rows asked for, in the dataset's row order whatever the number of processes that wrote it.

An activations folder may come from elsewhere, so it is read under the folder rule (`yamltrace._folder`):
the index is capped in size and checked whole when opened (`_index_check`), and each shard's header
is checked against the index the first time the shard is read. What the index says is then what is read.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from .._folder import read_json, safetensors_header
from ..errors import did_you_mean
from ._index import DTYPES, INDEX_FILE, MAX_INDEX_BYTES, ExtractError, tensor_name
from ._index_check import check_index, check_shard_header, shard_texts, text_columns

__all__ = ["Activations", "open_activations"]


class Activations:
    """An extraction directory, opened lazily. Rows are dataset rows (dimension 0 of every stored tensor).

    `acts.keys()`, `acts.layers(key)`, `acts.shape(key)` and `acts.dtype(key)` read no data;
    `acts.get(key, layer, rows)` returns one layer's rows; `acts.get(key, rows=...)` with `layer=None`
    stacks every kept layer into `[n_layers, rows, ...]`. `acts.columns()` names the data columns
    carried beside the captures (`extract(columns=...)`) and `acts.column(name, rows)` reads one: a
    tensor, or a list of `str` for a text column. `index` is the parsed `index.json`.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        path = self.directory / INDEX_FILE
        if not os.path.lexists(path):
            shards = sorted(p.name for p in self.directory.glob("shard-*.safetensors")) if self.directory.is_dir() else []
            hint = (
                f" It holds {len(shards)} shard(s) but no index: the run has not finished; run it again with resume=True."
                if shards
                else ""
            )
            raise FileNotFoundError(f"{self.directory} is not a finished yamltrace extraction: {INDEX_FILE} is missing.{hint}")
        self.index: dict[str, Any] = check_index(
            read_json(self.directory, INDEX_FILE, max_bytes=MAX_INDEX_BYTES, what="activation index"), path
        )
        self._keys: dict[str, dict[str, Any]] = self.index["keys"]
        self._files: list[str] = [s["file"] for s in self.index["shards"]]
        self._batches = self.index["batches"]  # [shard, offset, rows] in row order
        starts, total = [], 0
        for _, _, rows in self._batches:
            starts.append(total)
            total += rows
        self._starts, self._rows = starts, total
        self._open: dict[int, Any] = {}
        self._texts: dict[int, dict[str, list[str]]] = {}  # per opened shard, its text columns
        self._text_columns = text_columns(self.index)

    def __len__(self) -> int:
        return self._rows

    def keys(self) -> list[str]:
        return list(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def columns(self) -> list[str]:
        """The data columns carried beside the captures (`extract(columns=...)`), in the order given."""
        return list(self.index.get("columns", []))

    def column(self, name: str, rows: slice | range | None = None) -> torch.Tensor | list[str]:
        """Rows `rows` (default: all) of the carried data column `name`: a tensor, or one `str` per row for
        a column of text."""
        if name not in self.columns():
            raise KeyError(f"{name!r} is not a carried column; columns: {self.columns()}{did_you_mean(name, self.columns())}")
        if name not in self._text_columns:
            return self.get(name, rows=rows)
        start, stop = self._row_range(rows)
        texts: list[str] = []
        for shard, first, end in self._pieces(start, stop):
            self._shard(shard)
            texts.extend(self._texts[shard][name][first:end])
        return texts

    def _entry(self, key: str) -> dict[str, Any]:
        if key in self._text_columns:
            raise KeyError(f"{key!r} is a column of text, not a tensor: read it with column({key!r}).")
        if key not in self._keys:
            raise KeyError(f"{key!r} was not extracted; keys: {list(self._keys)}{did_you_mean(key, self._keys)}")
        return self._keys[key]

    def layers(self, key: str) -> list[int] | None:
        """The layers kept for `key` (`None` for a stored model input, which has no layers)."""
        layers = self._entry(key)["layers"]
        return None if layers is None else list(layers)

    def shape(self, key: str) -> torch.Size:
        """`(rows, *row shape)` of one layer of `key`."""
        return torch.Size([self._rows, *self._entry(key)["row_shape"]])

    def dtype(self, key: str) -> torch.dtype:
        return DTYPES[self._entry(key)["dtype"]]

    def get(self, key: str, layer: int | None = None, rows: slice | range | None = None) -> torch.Tensor:
        """Rows `rows` (default: all) of `key` at `layer`; `layer=None` stacks every kept layer first."""
        layers = self.layers(key)
        if layers is not None and layer is None:
            return torch.stack([self.get(key, kept, rows) for kept in layers])
        if layers is None and layer is not None:
            raise ValueError(f"{key!r} is a stored model input: it has no layers (got layer={layer}).")
        if layers is not None and layer not in layers:
            raise KeyError(f"layer {layer} of {key!r} was not extracted; layers kept: {layers}.")
        start, stop = self._row_range(rows)
        name = tensor_name(key, layer)
        pieces = [self._read(shard, name, a, b) for shard, a, b in self._pieces(start, stop)]
        if not pieces:
            return torch.empty((0, *self._entry(key)["row_shape"]), dtype=self.dtype(key))
        return pieces[0] if len(pieces) == 1 else torch.cat(pieces)

    def _row_range(self, rows: slice | range | None) -> tuple[int, int]:
        if rows is None:
            return 0, self._rows
        if isinstance(rows, range):
            rows = slice(rows.start, rows.stop, rows.step)
        if not isinstance(rows, slice):
            raise TypeError(f"rows must be a slice or a range, got {type(rows).__name__}.")
        start, stop, step = rows.indices(self._rows)
        if step != 1:
            raise ValueError(f"rows must be contiguous (step 1), got step {step}; read the range, then index it.")
        return start, max(start, stop)

    def _pieces(self, start: int, stop: int) -> list[tuple[int, int, int]]:
        """(shard, first, end) slices of shard rows that make up dataset rows [start, stop), in order;
        consecutive batches stored one after the other in one shard make one slice."""
        pieces: list[tuple[int, int, int]] = []
        batch = max(0, bisect.bisect_right(self._starts, start) - 1)
        while batch < len(self._batches) and self._starts[batch] < stop:
            shard, offset, rows = self._batches[batch]
            first = offset + max(start, self._starts[batch]) - self._starts[batch]
            end = offset + min(stop, self._starts[batch] + rows) - self._starts[batch]
            if pieces and pieces[-1][0] == shard and pieces[-1][2] == first:
                pieces[-1] = (shard, pieces[-1][1], end)
            elif end > first:
                pieces.append((shard, first, end))
            batch += 1
        return pieces

    def _read(self, shard: int, name: str, first: int, end: int) -> torch.Tensor:
        from safetensors import SafetensorError

        handle = self._shard(shard)
        try:
            return handle.get_slice(name)[first:end]  # type: ignore[no-any-return]
        except (SafetensorError, OSError, RuntimeError, ValueError) as e:
            raise ExtractError(
                f"{self.directory / self._files[shard]}: cannot read {name!r} ({type(e).__name__}: {e}); "
                "the shard is damaged: extract again into an empty folder"
            ) from None

    def _shard(self, number: int) -> Any:
        """Shard `number`, opened once its header (read under the folder rule) matches the index."""
        handle = self._open.get(number)
        if handle is None:
            from safetensors import SafetensorError, safe_open

            name = self._files[number]
            header = safetensors_header(self.directory, name, what="activation shard")
            check_shard_header(header, self.index, number, self.directory / name)
            self._texts[number] = shard_texts(header, self.index, number, self.directory / name)
            try:
                handle = self._open[number] = safe_open(str(self.directory / name), framework="pt")
            except (SafetensorError, OSError) as e:
                raise ExtractError(
                    f"{self.directory / name}: not a safetensors file ({type(e).__name__}: {e}); extract again"
                ) from None
        return handle

    def close(self) -> None:
        """Forget the open shards (their memory maps are released once no tensor read from them remains)."""
        self._open.clear()
        self._texts.clear()

    def __enter__(self) -> Activations:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        keys = ", ".join(f"{k}: {len(v['layers']) if v['layers'] is not None else 'input'}" for k, v in self._keys.items())
        return f"Activations({str(self.directory)!r}, {self._rows} rows; {keys})"


def open_activations(directory: str | os.PathLike[str]) -> Activations:
    """Open a finished extraction (a directory `extract` wrote) for lazy reading; see `Activations`.

    Args:
        directory: the `out_dir` given to `extract` (or `yamltrace extract --out`).

    Returns:
        `Activations`: `len()` rows; `get(key, layer=..., rows=...)` reads only what is asked for.

    Raises:
        FileNotFoundError: no `index.json` there (the extraction did not finish, or another folder).
        ExtractError: the index is not one `extract` writes (checked whole, located), or a shard does
            not match it (checked when the shard is first read).
        FolderError: a file of the folder is not a regular file inside it, or is over its size cap.
    """
    return Activations(directory)
