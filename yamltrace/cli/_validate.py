"""`yamltrace validate FILE_OR_DIR...`: check spec files against the schema; imports nothing from the model."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import SpecError
from ..spec import DEFAULT_MAX_BYTES, validate_spec
from ._common import EXIT_INVALID, EXIT_OK, EXIT_USAGE, positive_int
from ._files import Target, add_exclude, collect
from ._report import REPORTERS, FileResult

__all__ = ["add_validate"]


def _validate(target: Target, max_bytes: int) -> FileResult:
    if target.problem is not None:
        return FileResult(target.path, "unreadable", (target.problem,))
    try:
        # A Path is always read as a file (a string could be taken for YAML text).
        validate_spec(Path(target.path), max_bytes=max_bytes)
    except SpecError as e:
        return FileResult(target.path, "invalid", e.issues)
    return FileResult(target.path, "valid")


def _run_validate(args: argparse.Namespace) -> int:
    found = collect(args.files, exclude=args.exclude)
    results = [_validate(target, args.max_bytes) for target in found.targets]
    REPORTERS[args.format](sys.stdout).report(results, skipped=found.skipped)
    if any(r.status == "unreadable" for r in results):
        return EXIT_USAGE
    return EXIT_INVALID if any(r.status == "invalid" for r in results) else EXIT_OK


def add_validate(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "validate",
        help="check spec files against the schema (imports nothing from the model)",
        description="Check each spec file against the yamltrace spec schema and report every problem, located; "
        "a directory is searched recursively for *.yaml and *.yml files, and those without a top-level "
        "'yamltrace:' key (CI or pre-commit configs) are skipped and counted; a file named is always checked. "
        "One summary line per run. "
        "Exit status: 0 all valid, 1 a spec is invalid, 2 a usage error or a file that cannot be read.",
    )
    parser.add_argument("files", nargs="+", metavar="PATH", help="spec files (YAML) or directories of them")
    add_exclude(parser)
    parser.add_argument("--format", choices=sorted(REPORTERS), default="text", help="output format (default: text)")
    parser.add_argument(
        "--max-bytes",
        type=positive_int,
        default=DEFAULT_MAX_BYTES,
        metavar="N",
        help=f"refuse specs larger than N bytes, each base file too (default: {DEFAULT_MAX_BYTES})",
    )
    parser.set_defaults(run=_run_validate)
