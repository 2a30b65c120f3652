"""`ShardWriter`: a background thread that gathers batches into shards and makes each visible atomically.

The model loop hands each batch's CPU tensors to `put`, which blocks while `max_pending` batches are
already waiting: memory is bounded by one shard being filled plus those batches, however long the
dataset. A shard is written to a hidden temporary file, flushed to disk, then renamed to its final
name, so a crash at any moment leaves only whole shards behind. A batch never spans two shards.
"""

from __future__ import annotations

import json
import os
import queue
import threading
from pathlib import Path
from typing import Any

import torch

from ._index import BATCHES_FIELD, RUN_FIELD, fsync_directory, shard_name, temporary_name

__all__ = ["ShardWriter"]

_DONE = object()


class ShardWriter:
    """Write `(batch index, rows, {name: tensor})` items into shards of about `shard_bytes` each.

    Shards are named for `rank`, numbered from `first_seq`; each records `run` (the run's fingerprint)
    and its batches in its safetensors metadata. `close()` writes the last, partial shard; `abort()`
    drops what is buffered, so a failed run leaves exactly the shards a resume will keep.
    """

    def __init__(self, directory: Path, *, rank: int, first_seq: int, shard_bytes: int, run: str, max_pending: int = 4) -> None:
        self.directory = directory
        self.rank = rank
        self.seq = first_seq
        self.shard_bytes = shard_bytes
        self.run = run
        self.written: list[Path] = []
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max_pending)
        self._error: BaseException | None = None
        self._stop = threading.Event()  # set by abort: drop the buffer instead of writing it
        self._thread = threading.Thread(target=self._work, name=f"yamltrace-shard-writer-{rank}", daemon=True)
        self._thread.start()

    def put(self, batch: int, rows: int, tensors: dict[str, torch.Tensor]) -> None:
        """Queue one batch's tensors (rows along dimension 0); blocks while the queue is full."""
        while True:
            self._raise_if_failed()
            try:
                self._queue.put((batch, rows, tensors), timeout=0.1)
                return
            except queue.Full:
                continue

    def close(self) -> list[Path]:
        """Write what is buffered as the last shard, wait for the thread; returns the shards written."""
        self._finish()
        self._raise_if_failed()
        return self.written

    def abort(self) -> None:
        """Stop without writing the buffered batches (their shard would end at another batch than a full run's)."""
        self._stop.set()
        self._finish()

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
        buffered: list[tuple[int, int, dict[str, torch.Tensor]]] = []
        size = 0
        try:
            while True:
                item = self._queue.get()
                if item is _DONE:
                    if buffered and not self._stop.is_set():
                        self._write(buffered)
                    return
                if self._stop.is_set():
                    continue
                buffered.append(item)
                size += sum(t.numel() * t.element_size() for t in item[2].values())
                if size >= self.shard_bytes:
                    self._write(buffered)
                    buffered, size = [], 0
        except BaseException as e:  # reported to the model loop by put/close
            self._error = e
            self._drain()

    def _write(self, buffered: list[tuple[int, int, dict[str, torch.Tensor]]]) -> None:
        from safetensors.torch import save_file

        names = buffered[0][2]
        tensors = {name: torch.cat([item[2][name] for item in buffered]) for name in names}
        metadata = {RUN_FIELD: self.run, BATCHES_FIELD: json.dumps([[batch, rows] for batch, rows, _ in buffered])}
        temporary = self.directory / temporary_name(self.rank, self.seq)
        final = self.directory / shard_name(self.rank, self.seq)
        save_file(tensors, str(temporary), metadata=metadata)
        with open(temporary, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(temporary, final)
        fsync_directory(self.directory)
        self.written.append(final)
        self.seq += 1
