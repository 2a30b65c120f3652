"""`ShardWriter`: a background thread that writes shards and makes each visible atomically.

The model loop hands each batch's CPU tensors to `put`, which gathers them into a shard (a batch
never spans two shards) and, once the shard holds `shard_bytes`, queues it for the writer thread.
The queue holds at most `max_pending` shards and `put` waits while it is full, so memory is bounded
by about `(max_pending + 2) * shard_bytes` (one shard filling, the queued ones, one being written),
however long the dataset. Handing over whole shards wakes the thread once per shard, not per batch.
A shard is written to a hidden temporary file, flushed to disk, then renamed to its final name, so a
crash at any moment leaves only whole shards behind.
"""

from __future__ import annotations

import json
import os
import queue
import struct
import threading
from pathlib import Path
from typing import Any

import torch

from ._index import BATCHES_FIELD, KEYS_FIELD, RUN_FIELD, dtype_code, fsync_directory, shard_name, temporary_name

__all__ = ["ShardWriter", "write_safetensors"]

_DONE = object()
_Item = tuple[int, int, dict[str, torch.Tensor]]  # (batch index, rows, {name: tensor})


class ShardWriter:
    """Write `(batch index, rows, {name: tensor})` items into shards of about `shard_bytes` each.

    Shards are named for `rank`, numbered from `first_seq`; each records `run` (the run's fingerprint)
    and its batches in its safetensors metadata. `close()` writes the last, partial shard; `abort()`
    drops what is not written yet, so a failed run leaves exactly the shards a resume will keep.
    """

    def __init__(self, directory: Path, *, rank: int, first_seq: int, shard_bytes: int, run: str, max_pending: int = 1) -> None:
        self.directory = directory
        self.rank = rank
        self.seq = first_seq
        self.shard_bytes = shard_bytes
        self.run = run
        self.written: list[Path] = []
        self._filling: list[_Item] = []
        self._size = 0
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max_pending)
        self._error: BaseException | None = None
        self._stop = threading.Event()  # set by abort: drop queued shards instead of writing them
        self._thread = threading.Thread(target=self._work, name=f"yamltrace-shard-writer-{rank}", daemon=True)
        self._thread.start()

    def put(self, batch: int, rows: int, tensors: dict[str, torch.Tensor]) -> None:
        """Add one batch's tensors (rows along dimension 0); waits while `max_pending` shards are queued."""
        self._raise_if_failed()
        self._filling.append((batch, rows, tensors))
        self._size += sum(t.numel() * t.element_size() for t in tensors.values())
        if self._size >= self.shard_bytes:
            self._hand_over()

    def close(self) -> list[Path]:
        """Write what is left as the last shard, wait for the thread; returns the shards written."""
        if self._filling:
            self._hand_over()
        self._finish()
        self._raise_if_failed()
        return self.written

    def abort(self) -> None:
        """Stop without writing what is not written yet (its shard would end at another batch than a full run's)."""
        self._stop.set()
        self._filling = []
        self._finish()

    def _hand_over(self) -> None:
        shard, self._filling, self._size = self._filling, [], 0
        while True:
            self._raise_if_failed()
            try:
                self._queue.put(shard, timeout=0.1)
                return
            except queue.Full:
                continue

    def _finish(self) -> None:
        while self._thread.is_alive():
            try:
                self._queue.put(_DONE, timeout=0.1)
                break
            except queue.Full:
                if self._error is not None or self._stop.is_set():
                    self._drain()
        self._thread.join()

    def _drain(self) -> None:
        try:
            while True:
                self._queue.get_nowait()
        except queue.Empty:
            pass

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"writing activation shards to {self.directory} failed: {self._error}") from self._error

    def _work(self) -> None:
        try:
            while True:
                shard = self._queue.get()
                if shard is _DONE:
                    return
                if not self._stop.is_set():
                    self._write(shard)
        except BaseException as e:  # reported to the model loop by put/close
            self._error = e
            self._drain()

    def _write(self, buffered: list[_Item]) -> None:
        metadata = {
            RUN_FIELD: self.run,
            BATCHES_FIELD: json.dumps([[batch, rows] for batch, rows, _ in buffered]),
            KEYS_FIELD: json.dumps(list(buffered[0][2])),  # safetensors lists names sorted; this keeps capture order
        }
        temporary = self.directory / temporary_name(self.rank, self.seq)
        final = self.directory / shard_name(self.rank, self.seq)
        write_safetensors(temporary, [item[2] for item in buffered], metadata)
        os.replace(temporary, final)
        fsync_directory(self.directory)
        self.written.append(final)
        self.seq += 1


def write_safetensors(path: Path, pieces: list[dict[str, torch.Tensor]], metadata: dict[str, str]) -> None:
    """Write the row-wise concatenation of `pieces` (each `{name: tensor}`, same names) as one
    safetensors file, flushed to disk.

    The file is the safetensors format (an 8-byte little-endian header length, a JSON header naming
    each tensor's dtype, shape and byte range, then the bytes), written piece by piece: no tensor is
    concatenated in memory first, so writing a shard needs no second copy of it.
    """
    names = list(pieces[0])
    header: dict[str, Any] = {"__metadata__": metadata}
    offset = 0
    for name in names:
        first = pieces[0][name]
        rows = sum(piece[name].shape[0] for piece in pieces)
        size = sum(piece[name].numel() * piece[name].element_size() for piece in pieces)
        header[name] = {"dtype": dtype_code(first.dtype), "shape": [rows, *first.shape[1:]], "data_offsets": [offset, offset + size]}
        offset += size
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # the format pads the header to 8 bytes with spaces
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)))
        f.write(encoded)
        for name in names:
            for piece in pieces:
                tensor = piece[name].contiguous()
                # numpy's stubs declare the buffer protocol (__buffer__) for Python >= 3.12 only.
                f.write(memoryview(tensor.reshape(-1).view(torch.uint8).numpy()))  # type: ignore[arg-type]
        f.flush()
        os.fsync(f.fileno())
