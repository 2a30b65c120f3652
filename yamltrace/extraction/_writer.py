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
from operator import attrgetter
from pathlib import Path
from typing import Any, BinaryIO

import torch

from ._index import (
    BATCHES_FIELD,
    KEYS_FIELD,
    RUN_FIELD,
    TEXTS_FIELD,
    ExtractError,
    create_temporary,
    dtype_code,
    fsync_directory,
    shard_name,
)

__all__ = ["ShardWriter", "write_safetensors", "ABORT_WAIT"]

ABORT_WAIT = 10.0  # seconds abort waits for the thread (it stops between two writes of a shard)
# Bytes gathered before a write to the shard file (the header, small groups); a larger write goes straight to the file.
_FILE_BUFFER = 2**16
_GATHER_BYTES = 4 * 2**20  # a tensor's pieces under _FILE_BUFFER (one per batch) are joined into writes of at most this
# Dtypes whose `Tensor.numpy()` array is the tensor's bytes in one call; others (bfloat16, float8) are viewed as bytes.
_NUMPY_DTYPES = frozenset(
    {torch.float64, torch.float32, torch.float16, torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool}
)
_NBYTES = attrgetter("nbytes")
_POLL = 0.1  # seconds between two looks at the queue or the thread
_DONE = object()
_Item = tuple[int, int, dict[str, torch.Tensor], dict[str, list[str]]]  # (batch index, rows, {name: tensor}, {column: texts})


class _Abandoned(Exception):
    """A shard whose writing stopped half-way because the run was aborted (its temporary is removed)."""


class ShardWriter:
    """Write `(batch index, rows, {name: tensor})` items into shards of about `shard_bytes` each.

    Shards are named for `rank`, numbered from `first_seq`; each records `run` (the run's fingerprint)
    and its batches in its safetensors metadata. `close()` writes the last, partial shard; `abort()`
    drops what is not written yet, so a failed run leaves exactly the shards a resume will keep.
    `batches` counts the batches in the shards written so far.
    """

    def __init__(self, directory: Path, *, rank: int, first_seq: int, shard_bytes: int, run: str, max_pending: int = 1) -> None:
        self.directory = directory
        self.rank = rank
        self.seq = first_seq
        self.shard_bytes = shard_bytes
        self.run = run
        self.written: list[Path] = []
        self.batches = 0
        self._filling: list[_Item] = []
        self._size = 0
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
        self._filling.append((batch, rows, tensors, texts or {}))
        self._size += sum(map(_NBYTES, tensors.values()))
        if texts:
            self._size += sum(len(text.encode("utf-8")) for values in texts.values() for text in values)
        if self._size >= self.shard_bytes:
            self._hand_over()

    def close(self) -> list[Path]:
        """Write what is left as the last shard, wait for the thread; returns the shards written."""
        if self._filling:
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
        self._filling = []
        self._thread.join(ABORT_WAIT)
        return not self._thread.is_alive()

    def _hand_over(self) -> None:
        shard, self._filling, self._size = self._filling, [], 0
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

    def _write(self, buffered: list[_Item]) -> None:
        metadata = {
            RUN_FIELD: self.run,
            BATCHES_FIELD: json.dumps([[batch, rows] for batch, rows, _, _ in buffered]),
            KEYS_FIELD: json.dumps(list(buffered[0][2])),  # safetensors lists names sorted; this keeps capture order
        }
        if buffered[0][3]:
            metadata[TEXTS_FIELD] = json.dumps({name: [t for item in buffered for t in item[3][name]] for name in buffered[0][3]})
        final = self.directory / shard_name(self.rank, self.seq)
        fd, temporary = create_temporary(self.directory, final.name)
        try:
            with os.fdopen(fd, "wb", buffering=_FILE_BUFFER) as f:
                write_safetensors(f, [item[2] for item in buffered], metadata, stop=self._stop)
            os.replace(temporary, final)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
        fsync_directory(self.directory)
        self.written.append(final)
        self.batches += len(buffered)
        self.seq += 1


def write_safetensors(
    f: BinaryIO, pieces: list[dict[str, torch.Tensor]], metadata: dict[str, str], *, stop: threading.Event | None = None
) -> None:
    """Write the row-wise concatenation of `pieces` (each `{name: tensor}`, same names) as one
    safetensors file to the binary file `f`, flushed to disk.

    The file is the safetensors format (an 8-byte little-endian header length, a JSON header naming
    each tensor's dtype, shape and byte range, then the bytes). A tensor's small pieces are joined
    into writes of at most `_GATHER_BYTES` (one copy, as the file buffer would make, and one write
    instead of a write per piece), so writing a shard needs at most that much more memory, never a
    second copy of the shard. When `stop` is set, writing ends between two writes (raising `_Abandoned`).
    """
    names = list(pieces[0])
    header: dict[str, Any] = {"__metadata__": metadata}
    offset = 0
    columns = []
    for name in names:
        column = [piece[name] for piece in pieces]
        sizes = [t.nbytes for t in column]
        size = sum(sizes)
        header[name] = {
            "dtype": dtype_code(column[0].dtype),
            "shape": [sum(t.shape[0] for t in column), *column[0].shape[1:]],
            "data_offsets": [offset, offset + size],
        }
        offset += size
        columns.append((column, sizes))
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # the format pads the header to 8 bytes with spaces
    f.write(struct.pack("<Q", len(encoded)))
    f.write(encoded)
    for column, sizes in columns:
        for group in _groups(column, sizes):
            if stop is not None and stop.is_set():
                raise _Abandoned
            f.write(_raw(group[0] if len(group) == 1 else torch.cat(group)))
    f.flush()
    os.fsync(f.fileno())


def _groups(column: list[torch.Tensor], sizes: list[int]) -> list[list[torch.Tensor]]:
    """`column`'s tensors in order, as the runs written together: tensors smaller than the file buffer
    (which a write would copy into it anyway) joined up to `_GATHER_BYTES`; a larger one alone (its
    write copies nothing)."""
    groups: list[list[torch.Tensor]] = []
    group: list[torch.Tensor] = []
    total = 0
    for tensor, size in zip(column, sizes):
        if group and (size >= _FILE_BUFFER or total + size > _GATHER_BYTES):
            groups.append(group)
            group, total = [], 0
        group.append(tensor)
        total += size
        if size >= _FILE_BUFFER:
            groups.append(group)
            group, total = [], 0
    if group:
        groups.append(group)
    return groups


def _raw(tensor: torch.Tensor) -> Any:
    """The bytes of `tensor` in row-major order as a buffer (no copy when it is contiguous)."""
    if tensor.dtype in _NUMPY_DTYPES and tensor.is_contiguous():
        return tensor.numpy()
    return memoryview(tensor.contiguous().reshape(-1).view(torch.uint8).numpy())  # type: ignore[arg-type]
