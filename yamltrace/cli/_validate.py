"""`yamltrace validate FILE...`: check spec files against the schema; imports nothing from the model."""

from __future__ import annotations

import argparse
import os
import stat
import sys
from pathlib import Path

from ..errors import SpecError, SpecIssue
from ..spec import DEFAULT_MAX_BYTES, validate_spec
from ._common import EXIT_INVALID, EXIT_OK, EXIT_USAGE, positive_int
from ._report import REPORTERS, FileResult

__all__ = ["add_validate"]


def _unreadable(path: str) -> SpecIssue | None:
    """Why `path` cannot be read as a spec file, or None. A FIFO or device is never opened (it could block)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return SpecIssue("not a regular file; a spec must be a YAML file", "$", path)
        with open(path, "rb"):
            return None
    except FileNotFoundError:
        return SpecIssue("file not found", "$", path)
    except OSError as e:
        return SpecIssue(f"cannot read the file: {e.strerror or e}", "$", path)


def _validate_file(argument: str, max_bytes: int) -> FileResult:
    # A Path is always read as a file (a string could be taken for YAML text); issues name it as str(path).
    path = Path(argument)
    problem = _unreadable(str(path))
    if problem is not None:
        return FileResult(str(path), "unreadable", (problem,))
    try:
        validate_spec(path, max_bytes=max_bytes)
    except SpecError as e:
        return FileResult(str(path), "invalid", e.issues)
    return FileResult(str(path), "valid")


def _run_validate(args: argparse.Namespace) -> int:
    results = [_validate_file(path, args.max_bytes) for path in args.files]
    REPORTERS[args.format](sys.stdout).report(results)
    if any(r.status == "unreadable" for r in results):
        return EXIT_USAGE
    return EXIT_INVALID if any(r.status == "invalid" for r in results) else EXIT_OK


def add_validate(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "validate",
        help="check spec files against the schema (imports nothing from the model)",
        description="Check each spec file against the yamltrace spec schema and report every problem, located. "
        "Exit status: 0 all valid, 1 a spec is invalid, 2 a usage error or a file that cannot be read.",
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="spec files (YAML)")
    parser.add_argument("--format", choices=sorted(REPORTERS), default="text", help="output format (default: text)")
    parser.add_argument(
        "--max-bytes",
        type=positive_int,
        default=DEFAULT_MAX_BYTES,
        metavar="N",
        help=f"refuse specs larger than N bytes, each base file too (default: {DEFAULT_MAX_BYTES})",
    )
    parser.set_defaults(run=_run_validate)
