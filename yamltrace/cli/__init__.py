"""The `yamltrace` command line (also `python -m yamltrace`).

Each subcommand lives in its own module as one `add_<name>(commands)` function that adds its parser
and the function that runs it; `COMMANDS` lists them. `validate` and `schema` never import torch:
they need only PyYAML and jsonschema, so they run in CI jobs and pre-commit hooks without it; so does
`inspect`, which a downloaded checkpoint's spec can be read with before anything of it runs.

Output is line-oriented (one issue, one error per line); the warning that the installed transformers
is newer than the verified releases is printed as one `yamltrace: warning: ...` line too.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Callable
from typing import TextIO

from .. import __version__
from .._lazy import missing_extra_message
from ..errors import UnverifiedReleaseWarning
from ._check import add_check
from ._common import EXIT_BROKEN_PIPE, EXIT_INVALID, EXIT_OK, EXIT_USAGE
from ._extract import add_extract
from ._inspect import add_inspect
from ._schema import add_schema
from ._specs import add_specs
from ._validate import add_validate

__all__ = ["COMMANDS", "EXIT_BROKEN_PIPE", "EXIT_INVALID", "EXIT_OK", "EXIT_USAGE", "main"]

COMMANDS: tuple[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None], ...] = (
    add_validate,
    add_check,
    add_inspect,
    add_schema,
    add_specs,
    add_extract,
)


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="yamltrace", description="Declarative tracing for PyTorch models.")
    parser.add_argument("--version", action="version", version=f"yamltrace {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add in COMMANDS:
        add(commands)
    return parser


def _stdout_closed() -> int:
    """The reader of stdout went away (`yamltrace ... | head`): stop quietly, as a SIGPIPE'd tool does.

    stdout is pointed at the null device so the interpreter's final flush does not fail again.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_BROKEN_PIPE


def _run(args: argparse.Namespace) -> int:
    """Run the parsed command; a command that needs torch in the core install prints the extra to install."""
    try:
        status: int = args.run(args)
    except ImportError as e:
        message = missing_extra_message(e, "this command")
        if message is None:
            raise
        print(f"yamltrace {args.command}: {message}", file=sys.stderr)
        return EXIT_USAGE
    return status


def _working_directory_first() -> Callable[[], None]:
    """Put the working directory first on `sys.path`, as `python -m yamltrace` has it, so that `--model` and a
    spec's `model:` find the project's own modules; returns what takes it off again."""
    cwd = os.getcwd()
    if "" in sys.path or cwd in sys.path:
        return lambda: None
    sys.path.insert(0, cwd)
    return lambda: sys.path.remove(cwd) if cwd in sys.path else None


def _release_warning_on_one_line(show: Callable[..., None]) -> Callable[..., None]:
    """`warnings.showwarning` for the command line: the newer-release warning as one line, others by `show`."""

    def shown(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        if issubclass(category, UnverifiedReleaseWarning):
            print(f"yamltrace: warning: {message}", file=sys.stderr if file is None else file)
        else:
            show(message, category, filename, lineno, file, line)

    return shown


def main(argv: list[str] | None = None) -> int:
    """Run the command line on `argv` (default: `sys.argv[1:]`); returns the exit status.

    Modules named on the command line or by a spec are imported as `python -m` imports them: the working
    directory comes first on `sys.path` while the command runs.
    """
    restore = _working_directory_first()
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _release_warning_on_one_line(warnings.showwarning)
            return _main(argv)
    finally:
        restore()


def _main(argv: list[str] | None) -> int:
    try:
        try:
            args = _build_parser().parse_args(argv)
        except SystemExit as e:  # argparse exits after printing usage, --help, --version or an error
            status = e.code if isinstance(e.code, int) else EXIT_USAGE
        else:
            status = _run(args)
        sys.stdout.flush()
    except BrokenPipeError:
        return _stdout_closed()
    return status
