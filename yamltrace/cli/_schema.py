"""`yamltrace schema [--output PATH | --path]`: the packaged spec JSON Schema exactly as shipped, or where it is."""

from __future__ import annotations

import argparse
import sys
from importlib import resources

from ..spec import SCHEMA_FILE, schema_path
from ._common import EXIT_OK, EXIT_USAGE

__all__ = ["add_schema", "schema_text"]


def schema_text() -> str:
    """The spec JSON Schema shipped in the package, as text."""
    return resources.files("yamltrace").joinpath("schemas", SCHEMA_FILE).read_text(encoding="utf-8")


def _run_schema(args: argparse.Namespace) -> int:
    if args.path:
        print(schema_path())
        return EXIT_OK
    if args.output is None:
        sys.stdout.write(schema_text())
        return EXIT_OK
    try:
        with open(args.output, "w", encoding="utf-8", newline="") as f:
            f.write(schema_text())
    except OSError as e:
        print(f"yamltrace schema: cannot write {args.output}: {e.strerror or e}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK


def add_schema(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "schema",
        help="print or write the spec JSON Schema",
        description=f"Print the packaged spec JSON Schema ({SCHEMA_FILE}) exactly as shipped, "
        "or write it to PATH for an editor (yaml-language-server) or another validator.",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--output", "-o", metavar="PATH", help="write the schema to PATH instead of printing it")
    where.add_argument(
        "--path",
        action="store_true",
        help="print the installed schema file's path (for an editor's yaml.schemas setting or a $schema= modeline)",
    )
    parser.set_defaults(run=_run_schema)
