"""`yamltrace specs`: list the shipped spec library, or print one spec (never imports torch)."""

from __future__ import annotations

import argparse
import sys

from .. import specs
from ..errors import SpecError
from ._common import EXIT_INVALID, EXIT_OK

__all__ = ["add_specs"]


def _run_specs(args: argparse.Namespace) -> int:
    if args.name is None:
        for name in specs.list():
            sys.stdout.write(f"builtin:{name}\n")
        return EXIT_OK
    try:
        path = specs.path(args.name)
    except SpecError as e:
        sys.stderr.write(f"{e.issues[0].message}\n")
        return EXIT_INVALID
    sys.stdout.write(path.read_text(encoding="utf-8"))
    return EXIT_OK


def add_specs(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "specs",
        help="list the shipped spec library, or print one spec",
        description="Without NAME, list the shipped specs (load one with load_spec('builtin:NAME')); "
        "with NAME, print that spec as shipped.",
    )
    parser.add_argument("name", nargs="?", metavar="NAME", help="a shipped spec, e.g. llama or builtin:llama")
    parser.set_defaults(run=_run_specs)
