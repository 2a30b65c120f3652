"""`ShardWriter`: a background thread that writes shards and makes each visible atomically.

The model loop hands each batch's CPU tensors to `put`, which gathers them into a shard (a batch
never spans two shards) and, once the shard holds `shard_bytes`, queues it for the writer thread.
The queue holds at most `max_pending` shards and `put` waits while it is full, so memory is bounded
by about `(max_pending + 2) * shard_bytes` (one shard filling, the queued ones, one being written),
however long the dataset. Handing over whole shards wakes the thread once per shard, not per batch.
A shard is written to a hidden temporary file created exclusively (never through an existing name),
flushed to disk, then renamed to its final name, so a crash at any moment leaves only whole shards
behind. Nothing waits without a bound: the thread polls its queue and its stop flag, so `abort` (an
interrupt, a failed batch) returns within `ABORT_WAIT` seconds even if the queue was left mid-call.
"""

from __future__ import annotations

import json
import os
import queue
import struct
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import torch

from ._index import (
    BATCHES_FIELD,
    KEYS_FIELD,
    PARTS_FIELD,
    RUN_FIELD,
    TEXTS_FIELD,
    ExtractError,
    create_temporary,
    dtype_code,
    fsync_directory,
    shard_name,
)

__all__ = ["ShardWriter", "write_safetensors", "ABORT_WAIT"]

ABORT_WAIT = 10.0  # seconds abort waits for the thread (it stops between two parts of a shard)
# Bytes gathered before a write to the shard file (the header, small parts); a larger write goes straight to the file.
_FILE_BUFFER = 2**16
# A batch's tensors under this size are joined, per name, into chunks of about _CHUNK_BYTES in all.
_SMALL = 2**16
_CHUNK_BYTES = 2**20
# Dtypes whose `Tensor.numpy()` array is the tensor's bytes in one call; others (bfloat16, float8) are viewed as bytes.
_NUMPY_DTYPES = frozenset(
    {torch.float64, torch.float32, torch.float16, torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool}
)
_POLL = 0.1  # seconds between two looks at the queue or the thread
_DONE = object()
_Item = tuple[int, int, dict[str, list[str]]]  # (batch index, rows, {column: texts})


class _Column:
    """One tensor name's rows in the shard being filled, as the parts written one after the other.

    A batch's tensor under `_SMALL` bytes waits with the column's other small ones until they hold
    `chunk_bytes`, then they are joined into one chunk (`torch.cat`: one copy per chunk, not one per
    batch) and freed: keeping a shard's worth of small tensors alive until it is written slows the
    allocator for every forward in between (figures: docs/performance.md, Extraction), and a chunk is
    one write instead of one per batch. A column whose first small tensor is a view into a larger
    storage (a slice of something bigger) waits with copies instead, so it neither keeps that storage
    alive nor sees later writes into it. A larger tensor is kept as it is and written from its own memory.
    """

    __slots__ = ("parts", "_waiting", "_waiting_bytes", "_chunk_bytes", "_views")

    def __init__(self, chunk_bytes: int) -> None:
        self.parts: list[torch.Tensor] = []  # finished parts in row order (the waiting tensors are not yet)
        self._waiting: list[torch.Tensor] = []
        self._waiting_bytes = 0
        self._chunk_bytes = chunk_bytes
        self._views: bool | None = None  # whether the column's small tensors view a larger storage (its first says)

    def add(self, tensor: torch.Tensor, rows: int, size: int) -> None:
        """Append a batch's `rows` rows (`size` bytes): `tensor` has them, in the column's dtype and row
        shape (every batch is checked first: `_run._Rows`)."""
        if size >= _SMALL or not rows:
            self._seal()
            self.parts.append(tensor)
            return
        if self._views is None:  # (one storage read per column and shard; a batch's layout is the first's)
            self._views = tensor.untyped_storage().nbytes() > size
        self._waiting.append(tensor.clone() if self._views else tensor)
        self._waiting_bytes += size
        if self._waiting_bytes >= self._chunk_bytes:
            self._seal()

    def finished(self) -> list[torch.Tensor]:
        """Every part, the waiting tensors joined last."""
        self._seal()
        return self.parts

    def _seal(self) -> None:
        waiting = self._waiting
        if waiting:
            self.parts.append(torch.cat(waiting) if len(waiting) > 1 else waiting[0])
            self._waiting, self._waiting_bytes = [], 0


class _Shard:
    """The shard being filled: its batches `(index, rows, texts)` and a `_Column` per tensor name, in
    the first batch's order."""

    __slots__ = ("items", "columns", "size", "_chunk_bytes")

    def __init__(self, shard_bytes: int) -> None:
        self.items: list[_Item] = []
        self.columns: dict[str, _Column] = {}
        self.size = 0
        self._chunk_bytes = min(_CHUNK_BYTES, shard_bytes)

    def add(self, batch: int, rows: int, tensors: dict[str, torch.Tensor], texts: dict[str, list[str]]) -> None:
        self.items.append((batch, rows, texts))
        columns = self.columns
        if not columns:  # the first batch: a chunk is about the column's share of the shard
            share = max(self._chunk_bytes // max(len(tensors), 1), _SMALL)
            columns.update((name, _Column(share)) for name in tensors)
        for name, tensor in tensors.items():
            size = tensor.nbytes
            columns[name].add(tensor, rows, size)
            self.size += size
        if texts:
            self.size += sum(len(text.encode("utf-8")) for values in texts.values() for text in values)


class _Abandoned(Exception):
    """A shard whose writing stopped half-way because the run was aborted (its temporary is removed)."""


class ShardWriter:
    """Write `(batch index, rows, {name: tensor})` items into shards of about `shard_bytes` each.

    Shards are named for `rank`, numbered from `first_seq`; each records `run` (the run's fingerprint),
    `parts` (what a later run compares to say which part of it differs: `run_parts`) and its batches in its safetensors metadata. `close()` writes the last, partial shard; `abort()`
    drops what is not written yet, so a failed run leaves exactly the shards a resume will keep.
    `batches` counts the batches in the shards written so far.
    """

    def __init__(
        self,
        directory: Path,
        *,
        rank: int,
        first_seq: int,
        shard_bytes: int,
        run: str,
        max_pending: int = 1,
        parts: Mapping[str, str] | None = None,
    ) -> None:
        self.directory = directory
        self.parts = json.dumps(dict(parts)) if parts else None
        self.rank = rank
        self.seq = first_seq
        self.shard_bytes = shard_bytes
        self.run = run
        self.written: list[Path] = []
        self.batches = 0
        self._filling = _Shard(shard_bytes)
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max_pending)
        self._error: BaseException | None = None
        self._stop = threading.Event()  # set by abort: drop queued shards instead of writing them
        self._thread = threading.Thread(target=self._work, name=f"yamltrace-shard-writer-{rank}", daemon=True)
        self._thread.start()

    def put(self, batch: int, rows: int, tensors: dict[str, torch.Tensor], texts: dict[str, list[str]] | None = None) -> None:
        """Add one batch's tensors (rows along dimension 0) and text columns (one string per row); waits
        while `max_pending` shards are queued."""
        if self._error is not None:
            self._raise_if_failed()
        self._filling.add(batch, rows, tensors, texts or {})
        if self._filling.size >= self.shard_bytes:
            self._hand_over()

    def close(self) -> list[Path]:
        """Write what is left as the last shard, wait for the thread; returns the shards written."""
        if self._filling.items:
            self._hand_over()
        self._send(_DONE)
        while self._thread.is_alive():
            self._thread.join(_POLL)
            self._raise_if_failed()
        self._raise_if_failed()
        return self.written

    def abort(self) -> bool:
        """Stop without writing what is not written yet (its shard would end at another batch than a full
        run's); the shard being written is abandoned. Waits at most `ABORT_WAIT` seconds; True once stopped."""
        self._stop.set()
        self._filling = _Shard(self.shard_bytes)
        self._thread.join(ABORT_WAIT)
        return not self._thread.is_alive()

    def _hand_over(self) -> None:
        shard, self._filling = self._filling, _Shard(self.shard_bytes)
        self._send(shard)

    def _send(self, item: Any) -> None:
        while True:
            self._raise_if_failed()
            try:
                self._queue.put(item, timeout=_POLL)
                return
            except queue.Full:
                continue

    def _raise_if_failed(self) -> None:
        error = self._error
        if error is None:
            return
        reason = f"{error.strerror or error}" if isinstance(error, OSError) else f"{type(error).__name__}: {error}"
        raise ExtractError(
            f"writing activation shards to {self.directory} failed: {reason}. The finished shards are kept: free some "
            "space (or fix the folder), then run the same command again to resume."
        ) from error

    def _work(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    shard = self._queue.get(timeout=_POLL)
                except queue.Empty:
                    continue
                if shard is _DONE:
                    return
                self._write(shard)
        except _Abandoned:
            pass
        except BaseException as e:  # reported to the model loop by put/close
            self._error = e

    def _write(self, shard: _Shard) -> None:
        items = shard.items
        metadata = {
            RUN_FIELD: self.run,
            BATCHES_FIELD: json.dumps([[batch, rows] for batch, rows, _ in items]),
            KEYS_FIELD: json.dumps(list(shard.columns)),  # safetensors lists names sorted; this keeps capture order
        }
        if self.parts is not None:
            metadata[PARTS_FIELD] = self.parts
        if items[0][2]:
            metadata[TEXTS_FIELD] = json.dumps({name: [t for item in items for t in item[2][name]] for name in items[0][2]})
        final = self.directory / shard_name(self.rank, self.seq)
        fd, temporary = create_temporary(self.directory, final.name)
        try:
            with os.fdopen(fd, "wb", buffering=_FILE_BUFFER) as f:
                columns = {name: column.finished() for name, column in shard.columns.items()}
                write_safetensors(f, columns, metadata, stop=self._stop)
            os.replace(temporary, final)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
        fsync_directory(self.directory)
        self.written.append(final)
        self.batches += len(items)
        self.seq += 1


def write_safetensors(
    f: BinaryIO, columns: Mapping[str, Sequence[torch.Tensor]], metadata: dict[str, str], *, stop: threading.Event | None = None
) -> None:
    """Write each name's parts (tensors of one dtype and row shape, rows along dimension 0), joined row
    by row, as one safetensors file to the binary file `f`, flushed to disk.

    The file is the safetensors format (an 8-byte little-endian header length, a JSON header naming
    each tensor's dtype, shape and byte range, then the bytes), written part by part from the parts'
    own memory: no tensor is joined in memory first. When `stop` is set, writing ends between two
    parts (raising `_Abandoned`).
    """
    header: dict[str, Any] = {"__metadata__": metadata}
    offset = 0
    for name, parts in columns.items():
        size = sum(part.nbytes for part in parts)
        header[name] = {
            "dtype": dtype_code(parts[0].dtype),
            "shape": [sum(part.shape[0] for part in parts), *parts[0].shape[1:]],
            "data_offsets": [offset, offset + size],
        }
        offset += size
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # the format pads the header to 8 bytes with spaces
    f.write(struct.pack("<Q", len(encoded)))
    f.write(encoded)
    for parts in columns.values():
        for part in parts:
            if stop is not None and stop.is_set():
                raise _Abandoned
            f.write(_raw(part))
    f.flush()
    os.fsync(f.fileno())


def _raw(tensor: torch.Tensor) -> Any:
    """The bytes of `tensor` in row-major order as a buffer (no copy when it is contiguous)."""
    if tensor.dtype in _NUMPY_DTYPES and tensor.is_contiguous():
        return tensor.numpy()
    return memoryview(tensor.contiguous().reshape(-1).view(torch.uint8).numpy())  # type: ignore[arg-type]
