"""Specs loaded from files, kept per content: a spec file or `builtin:` name is read and resolved once
while it stays the same, not once per `trace` block.

`LoadCache` keeps each `Spec` (immutable) that a load of a file returned, under the load's arguments
(what the name resolves to at the load: the file's real path and the folder its relative names are read
from, so a re-pointed link or a relative name after `chdir` is another load; import consent, the model, the byte cap, the class registry and its
`version`), with what the load read (`SpecDocument.read`): for each file, the path it was named by,
its real path and the bytes parsed. A later load with the same arguments gets the kept `Spec` only
while every file holds the same bytes (read again each time: a file rewritten within the file
system's timestamp granularity is still seen), each base file of an `extends` chain still resolves
to the same real path, the top file's `extends` folder is the same, every class the spec names
is still imported (the registry's own rule for its cache), and every tensor an intervention read
from a safetensors file is still what that file holds (`TensorRead`); otherwise the file is loaded
again. Nothing is kept for a load that failed.

A tensor file is large (up to `MAX_TENSOR_FILE_BYTES`), so it is not read again on every hit: while
its real path is the same and its identity (`file_identity`: device, inode, size, modification and
change times in nanoseconds) is the one it had while it was read, it holds what was read. A rewrite
in place that keeps the size and puts the modification time back still changes the change time,
which no user can set. When the identity differs, the file is checked by content (the same header
entry, data bytes of the same BLAKE2b digest); if that holds, the new identity is kept.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
import threading
from collections.abc import Hashable, Iterable
from typing import Any, NamedTuple

from .._folder import names_folder
from ._reader import SpecDocument

__all__ = ["LoadCache", "TensorRead", "file_identity", "spec_loads", "tensor_digest"]

# The most loads kept (their keys differ by name, model class or consent); the oldest goes first.
MAX_LOADS = 64


class TensorRead(NamedTuple):
    """One tensor an intervention read: the file (the path it was read through, its real path, its
    size), the tensor's name and header entry (dtype, shape, data_offsets), the digest of its data
    bytes (`tensor_digest` of what was loaded), and the file's identity while it was read (None when
    it changed during the read: then the file is checked by content on every hit)."""

    path: str
    real: str
    size: int
    name: str
    entry: Any
    digest: bytes
    identity: tuple[int, ...] | None = None


def file_identity(info: os.stat_result) -> tuple[int, ...]:
    """What tells a file's state without reading it: device, inode, size, mtime_ns and ctime_ns."""
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def tensor_digest(data: Any) -> bytes:
    """The digest a `TensorRead` keeps of a tensor's data bytes (any buffer)."""
    return hashlib.blake2b(data, digest_size=32).digest()


class _Kept(NamedTuple):
    """One kept load: the spec, the files read (name, real path, bytes), the `extends` folder of the
    top file, the classes it names (their modules must stay imported), and what the key refers to by
    identity (kept alive so that no identity is reused)."""

    value: Any
    files: tuple[tuple[str, str, bytes], ...]
    folder: str | None
    classes: tuple[type, ...]
    refers_to: Any
    tensors: tuple[TensorRead, ...]


class LoadCache:
    """Loads of spec files by their arguments; `get` returns a kept value only while it would load again to it."""

    def __init__(self, size: int = MAX_LOADS) -> None:
        self._size = size
        self._kept: dict[Hashable, _Kept] = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any:
        """The value kept under `key`, or None when there is none or it may be stale (then it is dropped)."""
        kept = self._kept.get(key)
        if kept is None:
            return None
        now = _unchanged(kept)
        if now is kept:
            return kept.value
        with self._lock:
            if self._kept.get(key) is kept:
                if now is None:
                    del self._kept[key]
                else:  # tensor files touched but holding the same tensors: their new identities kept
                    self._kept[key] = now
        return None if now is None else now.value

    def put(
        self,
        key: Hashable,
        document: SpecDocument,
        value: Any,
        classes: Iterable[type],
        refers_to: Any = None,
        tensors: Iterable[TensorRead] = (),
    ) -> None:
        """Keep `value`, loaded from `document` (a document read from a file; others are not kept) and
        the tensor files `tensors` (what its interventions read)."""
        if not document.read:
            return
        kept = _Kept(value, document.read, document.folder, tuple(classes), refers_to, tuple(tensors))
        with self._lock:
            self._kept.pop(key, None)
            while len(self._kept) >= self._size:
                del self._kept[next(iter(self._kept))]
            self._kept[key] = kept

    def clear(self) -> None:
        """Forget every kept load."""
        with self._lock:
            self._kept.clear()

    def __len__(self) -> int:
        return len(self._kept)


def _unchanged(kept: _Kept) -> _Kept | None:
    """`kept` when loading again would read the same bytes through the same paths and resolve the same
    classes (a copy with new tensor file identities when only those changed), else None."""
    extends = len(kept.files) > 1
    for position, (named, real, content) in enumerate(kept.files):
        # The top file is read through the name it was given (as `read_spec_document` reads it); a base
        # file through its real path, which the folder and the `extends` name must still lead to.
        if (position or extends) and os.path.realpath(named) != real:
            return None
        if not _holds(named if position == 0 else real, content):
            return None
    if extends and names_folder(kept.files[0][0]) != kept.folder:
        return None
    modules = sys.modules
    for cls in kept.classes:
        if cls.__module__ not in modules:
            return None
    tensors = []
    for read in kept.tensors:
        now = _tensor_holds(read)
        if now is None:
            return None
        tensors.append(now)
    return kept if tuple(tensors) == kept.tensors else kept._replace(tensors=tuple(tensors))


def _holds(path: str, content: bytes) -> bool:
    """Whether `path` is a regular file holding exactly `content` (a FIFO or device is never opened).
    `os.open` and `os.read`: no file object to build, the cost of a hit is its system calls."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode) or info.st_size != len(content):
            return False
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            return os.read(fd, len(content) + 1) == content
        finally:
            os.close(fd)
    except (OSError, ValueError):
        return False


def _tensor_holds(read: TensorRead) -> TensorRead | None:
    """`read` when its file still resolves to the same real path and has the identity it had when it was
    read; otherwise, when it is a regular file of the same size whose header gives the tensor the same
    entry and whose data bytes have the same digest, `read` with the file's new identity; else None."""
    try:
        if os.path.realpath(read.path) != read.real:
            return None
        if read.identity is not None and file_identity(os.stat(read.real)) == read.identity:
            return read
        fd = os.open(read.real, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_size != read.size:
                return None
            length = int.from_bytes(os.pread(fd, 8, 0), "little")
            if not 0 < length <= read.size - 8:
                return None
            header = json.loads(os.pread(fd, length, 8))
            if not isinstance(header, dict) or header.get(read.name) != read.entry:
                return None
            start, end = read.entry["data_offsets"]
            data = os.pread(fd, end - start, 8 + length + start)
            same = file_identity(info) == file_identity(os.fstat(fd))
        finally:
            os.close(fd)
        if tensor_digest(data) != read.digest:
            return None
        return read._replace(identity=file_identity(info) if same else None)
    except (OSError, ValueError, TypeError, KeyError, RecursionError):  # json's errors are ValueErrors
        return None


# The loads of `load_spec` (`_resolve`).
spec_loads = LoadCache()
