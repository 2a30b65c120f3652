"""The `yamltrace` command line: `validate` specs against the schema, print the `schema`.

Each subcommand is one `_add_<name>` function that adds its parser and the function that runs it,
so more commands slot in beside these. Neither command imports torch: they need only PyYAML and
jsonschema, so they run in CI jobs and pre-commit hooks where torch is not installed.

Validation results are data (`FileResult`, holding `SpecIssue`s) rendered late by a `Reporter`:
text (`file:line:column: $.path: message`), one JSON document, or GitHub workflow commands.
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TextIO

from .errors import SpecError, SpecIssue
from .spec import DEFAULT_MAX_BYTES, SCHEMA_FILE, validate_spec

__all__ = ["FileResult", "GitHubReporter", "JsonReporter", "Reporter", "TextReporter", "main"]

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2


@dataclass(frozen=True)
class FileResult:
    """One file's outcome: `status` is "valid", "invalid" or "unreadable"; `issues` says why."""

    file: str
    status: str
    issues: tuple[SpecIssue, ...] = ()


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


class Reporter:
    """Renders a run's results to `stream`; subclasses choose the format."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def report(self, results: Sequence[FileResult]) -> None:
        raise NotImplementedError

    @staticmethod
    def summary(results: Sequence[FileResult]) -> dict[str, int]:
        statuses = [r.status for r in results]
        return {
            "files": len(results),
            "invalid": statuses.count("invalid"),
            "unreadable": statuses.count("unreadable"),
            "problems": sum(len(r.issues) for r in results),
        }


class TextReporter(Reporter):
    """Every issue as `file:line:column: $.path: message`, then `2 files, 1 invalid, 3 problems`."""

    def report(self, results: Sequence[FileResult]) -> None:
        for result in results:
            for issue in result.issues:
                print(issue.render(), file=self.stream)
        counts = self.summary(results)
        parts = [_count(counts["files"], "file"), f"{counts['invalid']} invalid"]
        if counts["unreadable"]:
            parts.append(f"{counts['unreadable']} unreadable")
        parts.append(_count(counts["problems"], "problem"))
        print(", ".join(parts), file=self.stream)


class JsonReporter(Reporter):
    """One JSON document: `valid`, `summary` counts and per-file `status` with `issues` as dicts."""

    def report(self, results: Sequence[FileResult]) -> None:
        document = {
            "valid": all(r.status == "valid" for r in results),
            "summary": self.summary(results),
            "files": [
                {"file": r.file, "status": r.status, "issues": [issue.to_dict() for issue in r.issues]}
                for r in results
            ],
        }
        print(json.dumps(document, indent=2), file=self.stream)


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


class GitHubReporter(Reporter):
    """GitHub Actions `::error` workflow commands, one per issue, so each shows on its line in the diff."""

    def report(self, results: Sequence[FileResult]) -> None:
        for result in results:
            for issue in result.issues:
                file = issue.file or result.file
                where = {"file": file, "line": issue.line, "col": issue.column, "title": "yamltrace"}
                properties = ",".join(f"{k}={_escape_property(str(v))}" for k, v in where.items() if v is not None)
                message = _escape_data(f"{issue.json_path}: {issue.message}")
                print(f"::error {properties}::{message}", file=self.stream)


REPORTERS: dict[str, type[Reporter]] = {"text": TextReporter, "json": JsonReporter, "github": GitHubReporter}


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


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number of bytes")
    return value


def _add_validate(commands: argparse._SubParsersAction) -> None:
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
        type=_positive_int,
        default=DEFAULT_MAX_BYTES,
        metavar="N",
        help=f"refuse specs larger than N bytes, each base file too (default: {DEFAULT_MAX_BYTES})",
    )
    parser.set_defaults(run=_run_validate)


def _run_schema(args: argparse.Namespace) -> int:
    sys.stdout.write(resources.files("yamltrace").joinpath("schemas", SCHEMA_FILE).read_text(encoding="utf-8"))
    return EXIT_OK


def _add_schema(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "schema",
        help="print the spec JSON Schema",
        description=f"Print the packaged spec JSON Schema ({SCHEMA_FILE}) exactly as shipped.",
    )
    parser.set_defaults(run=_run_schema)


_COMMANDS: tuple[Callable[[argparse._SubParsersAction], None], ...] = (_add_validate, _add_schema)


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="yamltrace", description="Declarative tracing for PyTorch models.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add in _COMMANDS:
        add(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line on `argv` (default: `sys.argv[1:]`); returns the exit status."""
    try:
        args = _build_parser().parse_args(argv)
    except SystemExit as e:  # argparse exits after printing usage, --help or an error
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    return args.run(args)
