"""`yamltrace check SPEC (--model pkg.mod:Class [--config FILE] | --checkpoint DIR)`: what a spec hooks.

The model is built on the meta device (no weight memory, no weights read). For each recorder the
command prints the module paths it hooks, for each patch the modules it replaces, for each intervention
the modules it edits; anything that matches nothing (a recorder not marked `optional`, a missing scope,
a patch, an intervention) is listed with the closest classes or paths, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path
from typing import Any

from ._common import EXIT_INVALID, EXIT_OK, EXIT_USAGE
from ._interventions import report_interventions

__all__ = ["add_check"]


class _Usage(Exception):
    """A usage problem: printed, exit status 2."""


def _model_class(reference: str) -> type:
    module_name, _, qualname = reference.partition(":")
    if not qualname:
        raise _Usage(f"--model {reference!r}: write it as package.module:Class")
    try:
        target: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as e:
        raise _Usage(f"--model {reference!r}: {e}") from e
    cls: type = target  # what the user named as the model class
    return cls


def _config(cls: type, config_file: Path | None) -> Any:
    config_class = getattr(cls, "config_class", None)
    if config_class is None:
        raise _Usage(f"{cls.__name__} has no config_class, so check cannot build it")
    if config_file is None:
        return config_class()
    if callable(getattr(config_class, "load", None)):  # yamltrace's Config
        return config_class.load(config_file)
    return config_class.from_json_file(str(config_file))


def _from_checkpoint(directory: Path, model: str | None) -> tuple[type, Path]:
    config_file = directory / "config.json"
    if not config_file.is_file():
        raise _Usage(f"--checkpoint {directory}: no config.json there")
    if model is not None:
        return _model_class(model), config_file
    architectures = json.loads(config_file.read_text(encoding="utf-8")).get("architectures") or []
    import transformers

    cls = getattr(transformers, architectures[0], None) if architectures else None
    if cls is None:
        raise _Usage(f"--checkpoint {directory}: config.json names no transformers architecture; add --model pkg.mod:Class")
    return cls, config_file


def _report(spec: Any, model: Any, out: Any) -> int:
    """Print what each recorder and patch of `spec` matches in `model`; the number of dead entries."""
    from .._trace_checks import dead_hints, patch_targets
    from ..engine import scope_modules

    sections = [(section.scope, section.outputs) for section in spec.sections()]
    paths = [path for path, _ in sections]
    names = {path for path, _ in model.named_modules()}
    dead = 0
    for scope, outputs in sections:
        label = f"scope {scope}" if scope else "outputs"
        if scope not in names:
            print(f"{label}: MISSING: {type(model).__name__} has no submodule {scope!r}", file=out)
            dead += any(not r.optional for rs in outputs.values() for r in rs)
            continue
        modules = scope_modules(model, scope, paths)
        for key, recorders in outputs.items():
            for position, recorder in enumerate(recorders):
                where = spec.where(scope, key, position)
                line = f" (line {where.line})" if where.line else ""
                hooked = [scope + path if scope else path[1:] or "<root>" for path, m in modules if recorder.matches(m, path)]
                what = " | ".join(t.__name__ for t in recorder.target_classes) or repr(recorder.class_name)
                if hooked:
                    print(f"{label}: {key}[{position}] {what}{line}: {len(hooked)} module(s): {', '.join(hooked)}", file=out)
                elif recorder.optional:
                    print(f"{label}: {key}[{position}] {what}{line}: no module (optional)", file=out)
                else:
                    dead += 1
                    print(f"{label}: {key}[{position}] {what}{line}: MATCHES NOTHING{dead_hints(recorder, modules)}", file=out)
    for entry, replaced in patch_targets(model, spec):
        if replaced:
            print(f"patch {entry.pattern!r} -> {entry.replace_with}: replaces {', '.join(replaced)}", file=out)
        else:
            dead += 1
            classes = sorted({type(m).__name__ for m in model.modules()})
            print(
                f"patch {entry.pattern!r} -> {entry.replace_with}: MATCHES NOTHING; the model's classes: {', '.join(classes)}",
                file=out,
            )
    return dead + report_interventions(spec, model, out)


def _run_check(args: argparse.Namespace) -> int:
    config_file: Path | None
    try:
        if args.checkpoint is not None:
            cls, config_file = _from_checkpoint(Path(args.checkpoint), args.model)
        elif args.model is not None:
            cls, config_file = _model_class(args.model), (None if args.config is None else Path(args.config))
        else:
            raise _Usage("give --model pkg.mod:Class or --checkpoint DIR")
        import torch

        from ..errors import SpecError
        from ..spec import load_spec

        try:
            spec = load_spec(Path(args.spec), trust_imports=args.trust_imports, for_model=cls)
        except SpecError as e:
            print(e, file=sys.stdout)
            return EXIT_INVALID
        with torch.device("meta"):
            model = cls(_config(cls, config_file))
    except (_Usage, OSError, ValueError) as e:
        print(f"yamltrace check: {e}", file=sys.stderr)
        return EXIT_USAGE
    print(f"{args.spec} on {cls.__name__} (built on the meta device):")
    dead = _report(spec, model, sys.stdout)
    if dead:
        print(f"{dead} entr{'y' if dead == 1 else 'ies'} match nothing: fix them, or mark recorders `optional: true`.")
        return EXIT_INVALID
    return EXIT_OK


def add_check(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "check",
        help="show which modules a spec hooks and replaces on a model built on the meta device",
        description="Build the model on the meta device (no weights), then print for each recorder the module paths "
        "it hooks and for each patch the modules it replaces. Exit status: 0 everything matches, 1 something "
        "matches nothing (or the spec is invalid), 2 a usage error.",
    )
    parser.add_argument("spec", metavar="SPEC", help="the spec file (YAML)")
    parser.add_argument("--model", metavar="PKG.MOD:CLASS", help="the model class (its module is imported)")
    parser.add_argument("--config", metavar="FILE", help="the config JSON to build the model with (default: its default config)")
    parser.add_argument("--checkpoint", metavar="DIR", help="a checkpoint directory: its config.json (and architecture)")
    parser.add_argument(
        "--trust-imports",
        action="store_true",
        help="allow importing the modules the spec names (as load_spec(trust_imports=True))",
    )
    parser.set_defaults(run=_run_check)
