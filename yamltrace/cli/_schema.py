"""`yamltrace schema`: print the packaged spec JSON Schema exactly as shipped."""

from __future__ import annotations

import argparse
import sys
from importlib import resources

from ..spec import SCHEMA_FILE
from ._common import EXIT_OK

__all__ = ["add_schema"]


def _run_schema(args: argparse.Namespace) -> int:
    sys.stdout.write(resources.files("yamltrace").joinpath("schemas", SCHEMA_FILE).read_text(encoding="utf-8"))
    return EXIT_OK


def add_schema(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "schema",
        help="print the spec JSON Schema",
        description=f"Print the packaged spec JSON Schema ({SCHEMA_FILE}) exactly as shipped.",
    )
    parser.set_defaults(run=_run_schema)
