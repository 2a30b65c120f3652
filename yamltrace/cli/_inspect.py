"""`yamltrace inspect PATH`: what a spec (or a checkpoint folder's `yamltrace.yaml`) declares, section by
section, its interventions in the order they apply. Reads and validates only: imports nothing, torch
included, so a downloaded checkpoint can be looked at before anything of it runs."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from .._folder import folder_file
from ..errors import FolderError, SpecError
from ..spec import validate_spec
from ._common import EXIT_INVALID, EXIT_OK, EXIT_USAGE
from ._report import escape_text, escaped_issue

__all__ = ["add_inspect"]

# The file of a checkpoint folder that holds its spec (`checkpoint._spec_file.SPEC_FILE`, which imports torch).
_CHECKPOINT_SPEC = "yamltrace.yaml"


def _flow(value: Any) -> str:
    """A YAML value on one line, as a spec could write it."""
    text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=float("inf"), allow_unicode=True)
    return escape_text(text.removesuffix("\n").removesuffix("\n...").strip())


def _lines(document: Any) -> list[str]:
    """The report: model, outputs, scopes, patches, then the interventions in the order they apply."""
    data: Mapping[str, Any] = document.data
    lines = [f"model: {escape_text(str(data['model']))}"] if "model" in data else []
    for key, recorders in data.get("outputs", {}).items():
        lines.append(f"output {escape_text(key)}: {_flow(recorders)}")
    for path, scope in data.get("scopes", {}).items():
        lines.append(f"scope {escape_text(path)}: {', '.join(map(escape_text, scope['outputs']))}")
    for pattern, replacement in data.get("patches", {}).items():
        lines.append(f"patch {escape_text(pattern)} -> {_flow(replacement)}")
    for position, (name, edit) in enumerate(data.get("interventions", {}).items(), 1):
        where = document.locate(("interventions", name))
        line = f" (line {where.line})" if where is not None else ""
        lines.append(f"intervention {position} {escape_text(name)}{line}: {_flow(edit)}")
    return lines


def _spec_path(path: Path) -> Path:
    """The spec file `path` names: itself, or a checkpoint folder's `yamltrace.yaml` (under the folder rule)."""
    if not path.is_dir():
        return path
    found = folder_file(path, _CHECKPOINT_SPEC, what="spec file", missing_ok=True)
    if found is None:
        raise FolderError(f"{path}: no {_CHECKPOINT_SPEC} in this folder, so it declares no spec")
    return found


def _run_inspect(args: argparse.Namespace) -> int:
    try:
        path = _spec_path(Path(args.path))
        document = validate_spec(path)
    except FolderError as e:
        print(f"yamltrace inspect: {escape_text(str(e))}", file=sys.stderr)
        return EXIT_USAGE
    except SpecError as e:
        for issue in e.issues:
            print(escaped_issue(issue))
        return EXIT_INVALID
    print(f"{escape_text(str(path))}:")
    for line in _lines(document) or ["(declares nothing)"]:
        print(f"  {line}")
    return EXIT_OK


def add_inspect(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "inspect",
        help="show what a spec or a checkpoint's yamltrace.yaml declares (imports nothing)",
        description="Validate a spec file (or the yamltrace.yaml of a checkpoint folder) and print what it declares: "
        "its outputs, scopes, patches and interventions, these in the order they apply. Imports nothing from the "
        "model. Exit status: 0 valid, 1 invalid, 2 no spec there.",
    )
    parser.add_argument("path", metavar="PATH", help="a spec file (YAML) or a checkpoint folder")
    parser.set_defaults(run=_run_inspect)
