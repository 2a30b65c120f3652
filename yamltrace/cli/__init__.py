"""The `yamltrace` command line (also `python -m yamltrace`).

Each subcommand lives in its own module as one `add_<name>(commands)` function that adds its parser
and the function that runs it; `COMMANDS` lists them. `validate` and `schema` never import torch:
they need only PyYAML and jsonschema, so they run in CI jobs and pre-commit hooks without it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from ._common import EXIT_INVALID, EXIT_OK, EXIT_USAGE
from ._check import add_check
from ._schema import add_schema
from ._specs import add_specs
from ._validate import add_validate

__all__ = ["COMMANDS", "EXIT_INVALID", "EXIT_OK", "EXIT_USAGE", "main"]

COMMANDS: tuple[Callable[[argparse._SubParsersAction], None], ...] = (add_validate, add_check, add_schema, add_specs)


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="yamltrace", description="Declarative tracing for PyTorch models.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add in COMMANDS:
        add(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line on `argv` (default: `sys.argv[1:]`); returns the exit status."""
    try:
        args = _build_parser().parse_args(argv)
    except SystemExit as e:  # argparse exits after printing usage, --help or an error
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    return args.run(args)
