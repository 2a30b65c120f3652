"""Which files `validate` reads: FILE arguments as given, directories walked for `*.yaml` / `*.yml`.

A directory is walked recursively in name order. Symbolic links to directories are followed unless
they lead back to a directory being walked (a loop, reported and not followed); a `*.yaml` entry that
is not a regular file (a FIFO, a socket, a device) is reported, never opened; a broken link is reported.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass

from ..errors import SpecIssue

__all__ = ["SPEC_SUFFIXES", "Target", "expand", "unreadable"]

SPEC_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class Target:
    """A file to validate, or (with `problem`) a path reported without being read."""

    path: str
    problem: SpecIssue | None = None


def unreadable(path: str) -> SpecIssue | None:
    """Why `path` cannot be read as a spec file, or None. A FIFO or device is never opened (it could block)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return SpecIssue("not a regular file; a spec must be a YAML file", "$", path)
        with open(path, "rb"):
            return None
    except FileNotFoundError:
        if os.path.islink(path):
            return SpecIssue(f"broken symbolic link to {os.readlink(path)!r}", "$", path)
        return SpecIssue("file not found", "$", path)
    except OSError as e:
        return SpecIssue(f"cannot read the file: {e.strerror or e}", "$", path)


def _key(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


def _walk(directory: str, ancestors: dict[tuple[int, int], str]) -> Iterator[Target]:
    try:
        entries = sorted(os.scandir(directory), key=lambda entry: entry.name)
    except OSError as e:
        yield Target(directory, SpecIssue(f"cannot list the directory: {e.strerror or e}", "$", directory))
        return
    for entry in entries:
        try:
            is_dir = entry.is_dir()  # follows a symbolic link
        except OSError:
            is_dir = False
        if is_dir:
            key = _key(entry.path)
            if key in ancestors:
                message = f"symbolic link loop back to {ancestors[key]}; not followed"
                yield Target(entry.path, SpecIssue(message, "$", entry.path))
            else:
                yield from _walk(entry.path, {**ancestors, key: entry.path})
        elif entry.name.endswith(SPEC_SUFFIXES):
            yield Target(entry.path, unreadable(entry.path))


def expand(arguments: list[str]) -> list[Target]:
    """The files named by `arguments`, in order: a file as given, a directory as its spec files."""
    targets: list[Target] = []
    for argument in arguments:
        if not os.path.isdir(argument):
            targets.append(Target(argument, unreadable(argument)))
            continue
        found = list(_walk(argument, {_key(argument): argument}))
        if not found:
            message = f"no spec files ({', '.join('*' + s for s in SPEC_SUFFIXES)}) in this directory"
            found = [Target(argument, SpecIssue(message, "$", argument))]
        targets.extend(found)
    return targets
