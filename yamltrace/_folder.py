"""Files of an untrusted folder: a checkpoint, an activations folder, a spec's folder.

One rule for every reader, because these folders come from downloads:
- a file is named by a bare file name (no `/`, `\\`, `..`, absolute path or NUL);
- it is a regular file: never a FIFO, device, socket or directory, which could block or never end;
- a symbolic link may not leave the folder; the one exception is the Hugging Face Hub cache layout,
  where `snapshots/<revision>/NAME` links into the same repository's `blobs/`;
- its size is checked (`fstat` on the opened descriptor, opened with `O_NONBLOCK`) before reading.

Every failure is a `FolderError` naming the file and how to fix it. A folder changed while it is read
by another local user is not in the threat model (see docs/security.md): the check is made on the
path that is then opened, and `read_bytes` checks the descriptor it reads.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .errors import FolderError

__all__ = ["FolderError", "bare_name", "folder_file", "read_bytes", "is_inside"]


def bare_name(name: object, *, what: str = "file") -> str:
    """`name` when it is a bare file name; a FolderError saying what was wrong otherwise."""
    bad = (
        not isinstance(name, str)
        or name in ("", ".", "..")
        or "\x00" in name
        or "/" in name
        or "\\" in name
        or os.path.isabs(name)
    )
    if bad:
        raise FolderError(
            f"{what} {name!r} is not a bare file name: files of a downloaded folder are named without "
            "folders, '..' or absolute paths; rename the entry to a file name inside the folder"
        )
    return str(name)


def is_inside(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> bool:
    """Whether `path` (already resolved) lies inside `root` (already resolved), or is it."""
    path, root = os.fspath(path), os.fspath(root)
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _hub_blobs(folder: Path) -> Path | None:
    """`<cache>/models--org--name/blobs` when `folder` is a Hub cache snapshot (`.../snapshots/<revision>`)."""
    parent = folder.parent
    if parent.name == "snapshots" and parent.parent.name.count("--") >= 1:
        return parent.parent / "blobs"
    return None


def folder_file(folder: str | os.PathLike[str], name: str, *, what: str = "file", missing_ok: bool = False) -> Path | None:
    """The checked path of `folder/name` under the folder rule; None when it does not exist and `missing_ok`."""
    name = bare_name(name, what=what)
    if missing_ok and not os.path.lexists(Path(folder) / name):
        return None
    return _checked(Path(folder), name, what)


def _checked(folder: Path, name: str, what: str) -> Path:
    path = folder / name
    try:
        link = os.lstat(path)
    except FileNotFoundError:
        raise FolderError(f"{path}: {what} not found; the folder must hold it as a regular file") from None
    except OSError as e:
        raise FolderError(f"{path}: cannot read the {what}: {e.strerror or e}") from None
    if stat.S_ISLNK(link.st_mode):
        _check_link(folder, path, what)
    try:
        info = os.stat(path)
    except OSError as e:
        raise FolderError(f"{path}: the {what} is a broken link ({e.strerror or e}); replace it with the file itself") from None
    if not stat.S_ISREG(info.st_mode):
        raise FolderError(
            f"{path}: the {what} is not a regular file ({_kind(info.st_mode)}); a FIFO, device or folder could block "
            "or never end: replace it with the file itself"
        )
    return path


def _check_link(folder: Path, path: Path, what: str) -> None:
    target = Path(os.path.realpath(path))
    root = Path(os.path.realpath(folder))
    blobs = _hub_blobs(root)
    if is_inside(target, root) or (blobs is not None and is_inside(target, os.path.realpath(blobs))):
        return
    raise FolderError(
        f"{path}: the {what} is a symbolic link that leaves its folder (to {target}); a downloaded folder may only "
        "link inside itself (or, in the Hub cache, into its own blobs/): copy the file into the folder instead"
    )


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))  # fmt: skip
    return next((label for test, label in kinds if test(mode)), "not a file")


def read_bytes(folder: str | os.PathLike[str], name: str, *, max_bytes: int, what: str = "file") -> bytes:
    """The bytes of `folder/name` under the folder rule, at most `max_bytes` (a FolderError past it)."""
    path = _checked(Path(folder), bare_name(name, what=what), what)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise FolderError(f"{path}: cannot open the {what}: {e.strerror or e}") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise FolderError(f"{path}: the {what} is not a regular file ({_kind(info.st_mode)}); replace it with the file")
        if info.st_size > max_bytes:
            raise FolderError(_too_big(path, what, info.st_size, max_bytes))
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise FolderError(_too_big(path, what, len(data), max_bytes))
    return data


def _too_big(path: Path, what: str, size: int, max_bytes: int) -> str:
    return f"{path}: the {what} is {size:,} bytes, over the {max_bytes:,}-byte limit for it; it is not a file yamltrace wrote"
