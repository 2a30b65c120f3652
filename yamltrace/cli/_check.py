"""`yamltrace check PATH... [--model pkg.mod:Class [--config FILE] | --checkpoint DIR]`: what specs hook.

Each spec file (a directory is walked as `validate` walks it) is checked against a model built on the
meta device (no weight memory, no weights read; `_check_model`): `--model` or `--checkpoint` for every
spec, else the class each spec's `model:` key names; one build per distinct model. For each recorder
the command notes the module paths it hooks, the element it takes and its shape (`_check_shapes`); for
each patch the modules it replaces, for each intervention the modules it edits. Problems (a recorder
not marked `optional`, a scope, a patch or an intervention that matches nothing) fail the check;
warnings (attention weights the model computes none of, a vocabulary key whose shape does not fit) do
not. Rendered by `_report`, as `validate`'s results are.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import sys
from pathlib import Path
from typing import Any

from ..errors import SpecError, SpecIssue, format_json_path
from ._check_layers import layer_issues
from ._check_model import ModelSource, Models, source_from_arguments
from ._common import EXIT_INVALID, EXIT_OK, EXIT_USAGE, _Usage
from ._files import Target, add_exclude, collect
from ._interventions import report_interventions
from ._report import REPORTERS, FileResult

__all__ = ["add_check"]


class _Findings:
    """What one spec's check found: note lines, problems and warnings (located issues)."""

    def __init__(self, header: str) -> None:
        self.notes = [header]
        self.issues: list[SpecIssue] = []
        self.warnings: list[SpecIssue] = []

    def result(self, file: str) -> FileResult:
        status = "invalid" if self.issues else "valid"
        return FileResult(file, status, tuple(self.issues), tuple(self.warnings), tuple(self.notes))


def _recorders(spec: Any, model: Any, found: _Findings) -> None:
    """Note each recorder's modules, the element it takes and its shape; problems and warnings located."""
    from .._trace_checks import attention_weight_issues, check_recorders, dead_hints
    from ..engine import scope_modules
    from ._check_shapes import probe, taken

    sections = [(section.scope, section.outputs) for section in spec.sections()]
    named = dict(model.named_modules())
    try:
        check_recorders(model, spec, {scope: named.get(scope) for scope, _ in sections})
    except SpecError as e:
        found.issues.extend(e.issues)
    found.warnings.extend(attention_weight_issues(model, spec))
    rows = []
    for scope, outputs in sections:
        label = f"scope {scope}" if scope else "outputs"
        if scope not in named:
            found.notes.append(f"{label}: MISSING: {type(model).__name__} has no submodule {scope!r}")
            continue
        modules = scope_modules(model, scope, [path for path, _ in sections])
        for key, recorders in outputs.items():
            for position, recorder in enumerate(recorders):
                hooked = [scope + path if scope else path[1:] for path, m in modules if recorder.matches(m, path)]
                rows.append((label, scope, key, position, recorder, hooked, dead_hints(recorder, modules)))
    found.issues.extend(layer_issues(spec, model, rows))
    run = probe(model, {path for row in rows for path in row[5]})
    if run.stopped:
        found.notes.append(f"shapes: {run.stopped}")
    for label, scope, key, position, recorder, hooked, hints in rows:
        where = spec.where(scope, key, position)
        what = " | ".join(t.__name__ for t in recorder.target_classes) or repr(recorder.class_name)
        line = f"{label}: {key}[{position}] {what}{f' (line {where.line})' if where.line else ''}: "
        if not hooked:
            found.notes.append(line + ("no module (optional)" if recorder.optional else f"MATCHES NOTHING{hints}"))
            continue
        took = taken(model, key, recorder, hooked, run)
        found.notes.append(line + f"{len(hooked)} module(s): {', '.join(hooked)}" + (f"; {took.note}" if took else ""))
        if took is not None and took.warning is not None:
            found.warnings.append(dataclasses.replace(where, message=took.warning))
        if took is not None and took.error is not None:
            found.issues.append(dataclasses.replace(where, message=took.error))


def _patches(spec: Any, model: Any, found: _Findings) -> None:
    from .._trace_checks import patch_targets

    for entry, replaced in patch_targets(model, spec):
        line = f"patch '{entry.pattern}' -> {entry.replace_with}: "  # escaped once, when the note is printed
        if replaced:
            found.notes.append(line + f"replaces {', '.join(replaced)}")
            continue
        classes = ", ".join(sorted({type(m).__name__ for m in model.modules()}))
        found.notes.append(line + f"MATCHES NOTHING; the model's classes: {classes}")
        message = f"the patch matches no module of {type(model).__name__}; fix the class name or pattern (the model's classes: {classes})"
        found.issues.append(SpecIssue(message, format_json_path(("patches", entry.pattern)), spec.source))


def _interventions(spec: Any, model: Any, found: _Findings) -> None:

    out = io.StringIO()
    for edit, reason in report_interventions(spec, model, out):
        where = edit.where if edit.where is not None else SpecIssue("", f"$.interventions.{edit.name}", spec.source)
        if reason is None:
            from ..intervening import no_module

            reason = no_module(model, edit)
        found.issues.append(dataclasses.replace(where, message=reason))
    found.notes.extend(out.getvalue().splitlines())


def _named_model(path: str, trust: bool) -> ModelSource | SpecIssue:
    """The class a spec's `model:` key names (resolved as its other classes are), or why there is none."""
    from torch import nn

    from ..spec import ImportPolicy, default_registry, validate_spec
    from ..spec._registry import import_module

    document = validate_spec(Path(path))
    reference = document.data.get("model")
    if reference is None:
        message = (
            "no model to check this spec on: give --model pkg.mod:Class or --checkpoint DIR, or write the spec's `model:` key"
        )
        return SpecIssue(message, "$", path)
    policy = ImportPolicy.for_model(None, trust=trust)
    try:
        imports = document.data.get("imports", [])
        for module in imports:
            import_module(module, policy)
        return ModelSource(default_registry.resolve(reference, imports=imports, policy=policy, subclass_of=nn.Module), None)
    except SpecError as e:
        return document.issue(("model",), e.issues[0].message)


def _check(target: Target, source: ModelSource | None, models: Models, trust: bool) -> FileResult:
    from ..spec import load_spec

    if target.problem is not None:
        return FileResult(target.path, "unreadable", (target.problem,))
    try:
        named = source or _named_model(target.path, trust)
        if isinstance(named, SpecIssue):
            return FileResult(target.path, "invalid", (named,))
        spec = load_spec(Path(target.path), trust_imports=trust, for_model=named.cls)
    except SpecError as e:
        return FileResult(target.path, "invalid", e.issues)
    model = models.get(named, spec)
    found = _Findings(f"{target.path} on {type(model).__name__} (built on the meta device):")
    _recorders(spec, model, found)
    _patches(spec, model, found)
    _interventions(spec, model, found)
    return found.result(target.path)


def _run_check(args: argparse.Namespace) -> int:
    try:
        source = source_from_arguments(args.model, args.config, args.checkpoint)
        models = Models()
        found = collect(args.specs, exclude=args.exclude)
        results = [_check(target, source, models, args.trust_imports) for target in found.targets]
    except (_Usage, OSError, ValueError) as e:
        print(f"yamltrace check: {e}", file=sys.stderr)
        return EXIT_USAGE
    REPORTERS[args.format](sys.stdout, detailed=True).report(results, skipped=found.skipped)
    if any(r.status == "unreadable" for r in results):
        return EXIT_USAGE
    return EXIT_INVALID if any(r.status == "invalid" for r in results) else EXIT_OK


def add_check(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "check",
        help="show which modules specs hook and replace, and what they take, on a model built on the meta device",
        description="Build each model on the meta device (no weights; one build per distinct model), then print for "
        "each recorder the module paths it hooks, the element it takes and its shape, and for each patch the modules "
        "it replaces; a directory is searched for spec files as validate does. Exit status: 0 everything matches "
        "(warnings allowed), 1 something matches nothing (or a spec is invalid), 2 a usage error or an unreadable file.",
    )
    parser.add_argument("specs", nargs="+", metavar="PATH", help="spec files (YAML) or directories of them")
    parser.add_argument(
        "--model", metavar="PKG.MOD:CLASS", help="the model class (its module is imported); default: each spec's model key"
    )
    parser.add_argument("--config", metavar="FILE", help="the config JSON to build the model with (default: its default config)")
    parser.add_argument("--checkpoint", metavar="DIR", help="a checkpoint directory: its config.json (and architecture)")
    add_exclude(parser)
    parser.add_argument("--format", choices=sorted(REPORTERS), default="text", help="output format (default: text)")
    parser.add_argument(
        "--trust-imports",
        action="store_true",
        help="allow importing the modules the specs name (as load_spec(trust_imports=True))",
    )
    parser.set_defaults(run=_run_check)
