"""`FolderLock`: one writer per output folder, for the whole run (an `fcntl.flock` on a lock file in it).

Each process of a run locks its own rank's file (`.extract-r000.lock`), so a second `extract` on the
same folder fails at once, with the holder's pid, host and start time (written in the lock file),
instead of mixing its shards and index into the first one's. The file is opened without following a
link and without blocking, and must be a regular file. It is removed when the run ends; a process
that dies leaves it behind unlocked (the kernel drops the lock), and the next run takes it over.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import stat
import time
from pathlib import Path
from types import TracebackType

from ._index import ExtractError

__all__ = ["FolderLock", "lock_name"]

_MAX_HOLDER_BYTES = 4096  # what is read back of another holder's lock file
_ATTEMPTS = 5  # a lock file removed by its holder between our open and our flock is opened again


def lock_name(rank: int) -> str:
    """The lock file of `rank`: hidden, never matched as a shard or a temporary."""
    return f".extract-r{rank:03d}.lock"


class FolderLock:
    """An exclusive lock on `directory` for `rank`, held from `__enter__` to `__exit__`."""

    def __init__(self, directory: Path, rank: int) -> None:
        self.path = directory / lock_name(rank)
        self._fd: int | None = None

    def __enter__(self) -> FolderLock:
        for _ in range(_ATTEMPTS):
            fd = self._open()
            if self._take(fd):
                self._fd = fd
                self._write_holder(fd)
                return self
        raise ExtractError(f"{self.path}: the lock file keeps being replaced; another process is writing to the folder.")

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        if self._fd is None:
            return
        try:
            os.unlink(self.path)  # while still locked: a newcomer then locks a new file, never this one
        except OSError:
            pass
        os.close(self._fd)
        self._fd = None

    def _open(self) -> int:
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
        try:
            fd = os.open(self.path, flags, 0o644)
        except OSError as e:
            raise ExtractError(
                f"{self.path}: cannot open the folder's lock file ({e.strerror or e}); it must be a regular file "
                "(not a link): remove it, or use another output folder."
            ) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise ExtractError(f"{self.path}: the lock file is not a regular file; remove it, or use another output folder.")
        return fd

    def _take(self, fd: int) -> bool:
        """Lock `fd`; False when it is no longer the file at `self.path` (its holder removed it meanwhile)."""
        import fcntl

        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = _holder(fd)
            os.close(fd)
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise ExtractError(f"{self.path}: cannot lock the output folder ({e.strerror or e}).") from None
            raise ExtractError(
                f"{self.path.parent} is being written by another extract ({holder}); wait for it to finish, "
                "or use another output folder."
            ) from None
        try:
            same = os.stat(self.path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if not same:
            os.close(fd)
        return same

    @staticmethod
    def _write_holder(fd: int) -> None:
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder).encode() + b"\n", 0)


def _holder(fd: int) -> str:
    """Who holds the lock, as its lock file says (`pid 12, host h, started ...`), or that it is unknown."""
    try:
        holder = json.loads(os.pread(fd, _MAX_HOLDER_BYTES, 0))
        return f"pid {int(holder['pid'])} on {str(holder['host'])!r}, started {str(holder['started'])!r}"
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return "its lock file does not say which process"
