"""Which files `validate` and `check` read: FILE arguments as given, directories walked for `*.yaml` / `*.yml`.

A file named on the command line is read as a spec whatever it holds. A file found by walking a
directory is read only when it looks like a spec (a top-level `yamltrace:` key); other YAML (CI
configs, pre-commit's) is counted as skipped, not reported invalid. `--exclude GLOB` leaves out the
files and directories whose path (relative to the walked directory, or as given) or name matches.

A directory is walked depth first in name order, iteratively, at most `MAX_WALK_DEPTH` levels down.
Symbolic links to directories are followed, but each real directory is walked once: a second path to
one (several links to one folder, which would make the walk exponential) is passed over, since its files
were validated through the first; a link loop back to a directory being walked, and a directory past the
depth limit, are reported. A `*.yaml` entry that is not a
regular file (a FIFO, a socket, a device) is reported, never opened; a broken link is reported.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import re
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from ..errors import SpecIssue

__all__ = [
    "MAX_WALK_DEPTH", "SPEC_SUFFIXES", "Found", "Target", "add_exclude", "collect", "looks_like_spec", "unreadable",
]  # fmt: skip

SPEC_SUFFIXES = (".yaml", ".yml")
MAX_WALK_DEPTH = 64  # folder levels below a DIR argument that `validate` walks
SNIFF_BYTES = 256 * 1024  # how much of a walked file is searched for the `yamltrace:` key (a spec's size cap)
# A top-level `yamltrace:` key (block style, quoted or not), or a top-level flow mapping that names it.
_SPEC_KEY = re.compile(rb"""^(?:\xef\xbb\xbf)?(?:yamltrace|"yamltrace"|'yamltrace')[ \t]*:|^\{[^#]*\byamltrace\b""", re.M)


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


@dataclass(frozen=True)
class Found:
    """What the arguments name: the files to read (`targets`) and the walked YAML files that are not specs."""

    targets: list[Target] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def looks_like_spec(path: str) -> bool:
    """Whether the file at `path` (a regular, readable file) has a top-level `yamltrace:` key in its first bytes."""
    with open(path, "rb") as f:
        return _SPEC_KEY.search(f.read(SNIFF_BYTES)) is not None


def _excluded(relative: str, name: str, exclude: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(relative, glob) or fnmatch.fnmatchcase(name, glob) for glob in exclude)


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


def _walk(top: str, exclude: Sequence[str] = ()) -> Iterator[Target]:
    """The YAML files under `top`, depth first in name order; each real directory once, `MAX_WALK_DEPTH` deep;
    entries matching an `exclude` glob left out."""
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
        elif exclude and _excluded(os.path.relpath(entry.path, top).replace(os.sep, "/"), entry.name, exclude):
            continue
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


def collect(arguments: Sequence[str], *, exclude: Sequence[str] = ()) -> Found:
    """The files named by `arguments`, in order: a file as given (strict: read whatever it holds), a
    directory as the spec files under it; walked YAML without a top-level `yamltrace:` key is `skipped`."""
    found = Found()
    for argument in arguments:
        if exclude and _excluded(argument.replace(os.sep, "/"), os.path.basename(argument), exclude):
            continue
        if not os.path.isdir(argument):
            found.targets.append(Target(argument, unreadable(argument)))
            continue
        specs: list[Target] = []
        skipped: list[Target] = []
        for target in _walk(argument, exclude):
            (skipped if target.problem is None and not looks_like_spec(target.path) else specs).append(target)
        if not specs:
            message = f"no spec files ({', '.join('*' + s for s in SPEC_SUFFIXES)}) in this directory"
            if skipped:
                message += f"; {len(skipped)} YAML {'file' if len(skipped) == 1 else 'files'} without a top-level 'yamltrace:' key skipped"
            specs = [Target(argument, SpecIssue(message, "$", argument))]
        found.targets.extend(specs)
        found.skipped.extend(t.path for t in skipped)
    return found


def add_exclude(parser: argparse.ArgumentParser) -> None:
    """The `--exclude GLOB` option of the commands that walk directories (`validate`, `check`)."""
    parser.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="GLOB",
        help="leave out files and directories whose path (relative to a directory argument) or name matches "
        "GLOB (fnmatch; repeatable), e.g. --exclude 'tests/data/*'",
    )
