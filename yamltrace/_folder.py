"""Files of an untrusted folder: a checkpoint, an activations folder, a spec's folder.

One rule for every reader, because these folders come from downloads:
- a file is named by a bare file name (no `/`, `\\`, `..`, absolute path or NUL);
- it is a regular file: never a FIFO, device, socket or directory, which could block or never end;
- a symbolic link may not leave the folder; the one exception is the Hugging Face Hub cache layout,
  where `snapshots/<revision>/NAME` links into the same repository's `blobs/`;
- its size is checked (`fstat` on the opened descriptor, opened with `O_NONBLOCK`) before reading;
- JSON (an index, a config) and safetensors headers (an 8-byte length, then JSON) are capped in bytes,
  nesting depth and number of objects, lists and strings before they are parsed, and a malformed one is a FolderError, never a
  `UnicodeDecodeError`, `JSONDecodeError` or `RecursionError`.

Every failure is a `FolderError` naming the file and how to fix it. A folder changed while it is read
by another local user is not in the threat model (see docs/security.md): the check is made on the
path that is then opened, and `read_bytes` checks the descriptor it reads.
"""

from __future__ import annotations

import itertools
import json
import operator
import os
import stat
from pathlib import Path
from io import BufferedReader
from typing import Any, Literal, overload

from .errors import FolderError

__all__ = [
    "FolderError",
    "MAX_JSON_DEPTH",
    "MAX_JSON_ITEMS",
    "MAX_HEADER_BYTES",
    "bare_name",
    "folder_file",
    "read_bytes",
    "read_json",
    "parse_json",
    "safetensors_header",
    "is_inside",
    "inside_folder",
    "names_folder",
    "resolved_file",
]

MAX_JSON_DEPTH = 64  # nesting levels of a folder's JSON file or safetensors header; yamltrace writes 4 at most
# objects, lists and strings in one such file, each costing 50 bytes or more once parsed (an index at its
# 64 MiB cap holds 2.4 million, a 100,000-tensor safetensors header 800,000)
MAX_JSON_ITEMS = 4_000_000
MAX_HEADER_BYTES = 64 * 2**20  # bytes of one safetensors header (a shard of 100,000 tensors needs about 10 MB)


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
    """`<cache>/models--org--name/blobs` when `folder` is a Hub cache snapshot (`.../snapshots/<revision>`)
    or a folder inside one (a `subfolder=` of the repository)."""
    for snapshot in (folder, *folder.parents):
        if snapshot.parent.name == "snapshots" and snapshot.parent.parent.name.count("--") >= 1:
            return snapshot.parent.parent / "blobs"
    return None


@overload
def folder_file(folder: str | os.PathLike[str], name: str, *, what: str = ..., missing_ok: Literal[False] = ...) -> Path: ...


@overload
def folder_file(folder: str | os.PathLike[str], name: str, *, what: str = ..., missing_ok: bool) -> Path | None: ...


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
    if not inside_folder(path, folder):
        raise FolderError(
            f"{path}: the {what} is a symbolic link that leaves its folder (to {os.path.realpath(path)}); a downloaded "
            "folder may only link inside itself (or, in the Hub cache, into its own blobs/): copy the file into the folder instead"
        )


def inside_folder(path: str | os.PathLike[str], folder: str | os.PathLike[str]) -> bool:
    """Whether `path`, links resolved, lies inside `folder` (resolved), or, when `folder` is (in) a Hub
    cache snapshot, inside the same repository's `blobs/`."""
    target, root = os.path.realpath(path), os.path.realpath(folder)
    blobs = _hub_blobs(Path(root))
    return is_inside(target, root) or (blobs is not None and is_inside(target, os.path.realpath(blobs)))


def names_folder(path: str | os.PathLike[str]) -> str:
    """The real folder that relative names in the file `path` (a spec's `extends`) resolve against: the
    folder of its target, except for a Hub cache snapshot link into `blobs/`, whose names are the snapshot's."""
    return resolved_file(path)[1]


def resolved_file(path: str | os.PathLike[str]) -> tuple[str, str]:
    """The real path of the file `path` (links resolved) and its `names_folder`. The folder's links are
    resolved once: a file that is no link is its real folder's entry."""
    absolute = os.path.abspath(path)
    named_in = os.path.realpath(os.path.dirname(absolute))
    name = os.path.basename(absolute)
    if not name or os.path.islink(absolute):  # (`abspath` leaves no "." or ".." to resolve)
        real = os.path.realpath(absolute)
    else:
        real = os.path.join(named_in, name)
    if "snapshots" in named_in:  # (`_hub_blobs` looks for a folder of that name)
        blobs = _hub_blobs(Path(named_in))
        if blobs is not None and is_inside(real, os.path.realpath(blobs)):
            return real, named_in
    return real, os.path.dirname(real)


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))  # fmt: skip
    return next((label for test, label in kinds if test(mode)), "not a file")


def read_bytes(folder: str | os.PathLike[str], name: str, *, max_bytes: int, what: str = "file") -> bytes:
    """The bytes of `folder/name` under the folder rule, at most `max_bytes` (a FolderError past it)."""
    path = _checked(Path(folder), bare_name(name, what=what), what)
    with _open(path, what) as f:
        size = os.fstat(f.fileno()).st_size
        if size > max_bytes:
            raise FolderError(_too_big(path, what, size, max_bytes))
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise FolderError(_too_big(path, what, len(data), max_bytes))
    return data


def _open(path: Path, what: str) -> BufferedReader:
    """`path` opened for reading without blocking, checked again on the descriptor to be a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise FolderError(f"{path}: cannot open the {what}: {e.strerror or e}") from None
    f = os.fdopen(fd, "rb")
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        f.close()
        raise FolderError(f"{path}: the {what} is not a regular file ({_kind(mode)}); replace it with the file")
    return f


def read_json(folder: str | os.PathLike[str], name: str, *, max_bytes: int, what: str = "file") -> Any:
    """The JSON document `folder/name`, read under the folder rule (at most `max_bytes`, `MAX_JSON_DEPTH` deep)."""
    return parse_json(read_bytes(folder, name, max_bytes=max_bytes, what=what), Path(folder) / name, what)


def parse_json(data: bytes, path: Path, what: str) -> Any:
    """`data` parsed as JSON; a FolderError naming `path` for bad UTF-8 or JSON, or past `MAX_JSON_DEPTH` / `MAX_JSON_ITEMS`."""
    brackets = data.translate(_STEPS, _NOT_BRACKETS)  # one byte per bracket, brackets in strings included
    items = brackets.count(2) + data.count(b'"') // 2  # at most this many objects, lists and strings
    if items > MAX_JSON_ITEMS:
        raise FolderError(
            f"{path}: the {what} holds {items:,} objects, lists and strings, over {MAX_JSON_ITEMS:,} (MAX_JSON_ITEMS); {_NOT_OURS}"
        )
    if _depth(brackets) > MAX_JSON_DEPTH:
        raise FolderError(f"{path}: the {what} nests deeper than {MAX_JSON_DEPTH} levels (MAX_JSON_DEPTH); {_NOT_OURS}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise FolderError(f"{path}: the {what} is not UTF-8 text (byte {e.start}); it is not a file yamltrace can read") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise FolderError(f"{path}:{e.lineno}:{e.colno}: the {what} is not valid JSON ({e.msg}); restore the file") from None
    except RecursionError:
        raise FolderError(f"{path}: the {what} nests deeper than Python can parse; {_NOT_OURS}") from None


_NOT_OURS = "it is not a file yamltrace wrote"
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))
_STEPS = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")  # an opening bracket steps 2 - 1, a closing one 0 - 1


def _depth(brackets: bytes) -> int:
    """How deep a JSON text nests, from its brackets alone (`_STEPS`), before it is parsed; in C. Brackets
    inside strings count too (files yamltrace reads have none); a document that hides its depth that way
    still meets the parser's recursion limit, reported as too deep."""
    return max(itertools.accumulate(map(operator.sub, brackets, itertools.repeat(1))), default=0)


def safetensors_header(
    folder: str | os.PathLike[str], name: str, *, what: str = "safetensors file", max_header_bytes: int = MAX_HEADER_BYTES
) -> dict[str, Any]:
    """The JSON header of the safetensors file `folder/name` (its 8-byte length checked against
    `max_header_bytes` and the file's size first), read under the folder rule; `safe_open` may follow."""
    path = _checked(Path(folder), bare_name(name, what=what), what)
    with _open(path, what) as f:
        size = os.fstat(f.fileno()).st_size
        prefix = f.read(8)
        length = int.from_bytes(prefix, "little") if len(prefix) == 8 else -1
        if length < 0 or length + 8 > size:
            raise FolderError(f"{path}: the {what} is cut short or not a safetensors file (its header length does not fit)")
        if length > max_header_bytes:
            raise FolderError(_too_big(path, f"{what}'s header", length, max_header_bytes))
        data = f.read(length)
    header = parse_json(data, path, f"{what}'s header")
    if not isinstance(header, dict) or not isinstance(header.get("__metadata__", {}), dict):
        raise FolderError(f"{path}: the {what}'s header is not a safetensors header (a JSON object of tensors)")
    return header


def _too_big(path: Path, what: str, size: int, max_bytes: int) -> str:
    return f"{path}: the {what} is {size:,} bytes, over the {max_bytes:,}-byte limit for it; {_NOT_OURS}"
