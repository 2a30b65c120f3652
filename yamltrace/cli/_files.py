"""Which files `validate` reads: FILE arguments as given, directories walked for `*.yaml` / `*.yml`.

A directory is walked depth first in name order, iteratively, at most `MAX_WALK_DEPTH` levels down.
Symbolic links to directories are followed, but each real directory is walked once: a second path to
one (several links to one folder, which would make the walk exponential) is passed over, since its files
were validated through the first; a link loop back to a directory being walked, and a directory past the
depth limit, are reported. A `*.yaml` entry that is not a
regular file (a FIFO, a socket, a device) is reported, never opened; a broken link is reported.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass

from ..errors import SpecIssue

__all__ = ["MAX_WALK_DEPTH", "SPEC_SUFFIXES", "Target", "expand", "unreadable"]

SPEC_SUFFIXES = (".yaml", ".yml")
MAX_WALK_DEPTH = 64  # folder levels below a DIR argument that `validate` walks


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


def _listing(directory: str) -> list[os.DirEntry[str]] | Target:
    try:
        return sorted(os.scandir(directory), key=lambda entry: entry.name)
    except OSError as e:
        return Target(directory, SpecIssue(f"cannot list the directory: {e.strerror or e}", "$", directory))


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()  # follows a symbolic link
    except OSError:
        return False


def _skipped(path: str, message: str) -> Target:
    return Target(path, SpecIssue(message, "$", path))


def _walk(top: str) -> Iterator[Target]:
    """The spec files under `top`, depth first in name order; each real directory once, `MAX_WALK_DEPTH` deep."""
    listing = _listing(top)
    if isinstance(listing, Target):
        yield listing
        return
    walked = {_key(top)}
    stack = [iter(listing)]
    ancestors = [(_key(top), top)]  # the directories of the stack's listings, for loop messages
    while stack:
        entry = next(stack[-1], None)
        if entry is None:
            stack.pop()
            ancestors.pop()
        elif _is_dir(entry):
            key = _key(entry.path)
            loop = next((path for k, path in ancestors if k == key), None)
            if loop is not None:
                yield _skipped(entry.path, f"symbolic link loop back to {loop}; not followed")
            elif key in walked:
                continue  # another path to a directory walked already: its files were validated through the first
            elif len(stack) > MAX_WALK_DEPTH:
                message = f"more than {MAX_WALK_DEPTH} levels below {top} (MAX_WALK_DEPTH); not walked: validate it on its own"
                yield _skipped(entry.path, message)
            else:
                walked.add(key)
                listing = _listing(entry.path)
                if isinstance(listing, Target):
                    yield listing
                else:
                    stack.append(iter(listing))
                    ancestors.append((key, entry.path))
        elif entry.name.endswith(SPEC_SUFFIXES):
            yield Target(entry.path, unreadable(entry.path))


def expand(arguments: list[str]) -> list[Target]:
    """The files named by `arguments`, in order: a file as given, a directory as its spec files."""
    targets: list[Target] = []
    for argument in arguments:
        if not os.path.isdir(argument):
            targets.append(Target(argument, unreadable(argument)))
            continue
        found = list(_walk(argument))
        if not found:
            message = f"no spec files ({', '.join('*' + s for s in SPEC_SUFFIXES)}) in this directory"
            found = [Target(argument, SpecIssue(message, "$", argument))]
        targets.extend(found)
    return targets
