"""Specs loaded from files, kept per content: a spec file or `builtin:` name is read and resolved once
while it stays the same, not once per `trace` block.

`LoadCache` keeps each `Spec` (immutable) that a load of a file returned, under the load's arguments
(the name it was given, import consent, the model, the byte cap, the class registry and its
`version`), with what the load read (`SpecDocument.read`): for each file, the path it was named by,
its real path and the bytes parsed. A later load with the same arguments gets the kept `Spec` only
while every file holds the same bytes (read again each time: a file rewritten within the file
system's timestamp granularity is still seen), each base file of an `extends` chain still resolves
to the same real path, the top file's `extends` folder is the same, and every class the spec names
is still imported (the registry's own rule for its cache); otherwise the file is loaded again.
Nothing is kept for a load that failed.
"""

from __future__ import annotations

import os
import stat
import sys
import threading
from collections.abc import Hashable, Iterable
from typing import Any, NamedTuple

from .._folder import names_folder
from ._reader import SpecDocument

__all__ = ["LoadCache", "spec_loads"]

# The most loads kept (their keys differ by name, model class or consent); the oldest goes first.
MAX_LOADS = 64


class _Kept(NamedTuple):
    """One kept load: the spec, the files read (name, real path, bytes), the `extends` folder of the
    top file, the classes it names (their modules must stay imported), and what the key refers to by
    identity (kept alive so that no identity is reused)."""

    value: Any
    files: tuple[tuple[str, str, bytes], ...]
    folder: str | None
    classes: tuple[type, ...]
    refers_to: Any


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
        if _unchanged(kept):
            return kept.value
        with self._lock:
            if self._kept.get(key) is kept:
                del self._kept[key]
        return None

    def put(self, key: Hashable, document: SpecDocument, value: Any, classes: Iterable[type], refers_to: Any = None) -> None:
        """Keep `value`, loaded from `document` (a document read from a file; others are not kept)."""
        if not document.read:
            return
        kept = _Kept(value, document.read, document.folder, tuple(classes), refers_to)
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


def _unchanged(kept: _Kept) -> bool:
    """Whether loading again would read the same bytes through the same paths and resolve the same classes."""
    extends = len(kept.files) > 1
    for position, (named, real, content) in enumerate(kept.files):
        # The top file is read through the name it was given (as `read_spec_document` reads it); a base
        # file through its real path, which the folder and the `extends` name must still lead to.
        if (position or extends) and os.path.realpath(named) != real:
            return False
        if not _holds(named if position == 0 else real, content):
            return False
    if extends and names_folder(kept.files[0][0]) != kept.folder:
        return False
    modules = sys.modules
    for cls in kept.classes:
        if cls.__module__ not in modules:
            return False
    return True


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


# The loads of `load_spec` (`_resolve`).
spec_loads = LoadCache()
