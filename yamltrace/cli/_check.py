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
import contextlib
import dataclasses
import io
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import SpecError, SpecIssue
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


def _patches(spec: Any, model: Any, document: Any, found: _Findings) -> None:
    from .._trace_checks import patch_targets

    for entry, replaced in patch_targets(model, spec.patches):
        line = f"patch '{entry.pattern}' -> {entry.replace_with}: "  # escaped once, when the note is printed
        if replaced:
            found.notes.append(line + f"replaces {', '.join(replaced)}")
            continue
        found.notes.append(line + f"MATCHES NOTHING; the model's classes: {_classes(model)}")
        found.issues.append(_matches_nothing(document, entry.pattern, model))


def _classes(model: Any) -> str:
    return ", ".join(sorted({type(m).__name__ for m in model.modules()}))


def _matches_nothing(document: Any, pattern: str, model: Any) -> SpecIssue:
    """The problem of a patch key that selects no module of `model`, located at the key."""
    message = (
        f"the patch matches no module of {type(model).__name__}; fix the class name or pattern "
        f"(the model's classes: {_classes(model)})"
    )
    return document.issue(("patches", pattern), message, at_key=True)  # type: ignore[no-any-return]


def _unmatched_patches(document: Any, model: Any) -> list[SpecIssue]:
    """The patch keys that select no module of `model`, read from the document: found also when the spec
    does not resolve (a replacement class that cannot be found hides no key that matches nothing)."""
    from torch import nn

    from .._trace_checks import patch_targets
    from ..spec import PatchEntry

    entries = []
    for pattern, value in document.data.get("patches", {}).items():
        device = value.get("device") if isinstance(value, dict) else None
        entries.append(PatchEntry(pattern, nn.Module, "", device))
    return [_matches_nothing(document, e.pattern, model) for e, replaced in patch_targets(model, entries) if not replaced]


def _interventions(spec: Any, model: Any, found: _Findings) -> None:

    out = io.StringIO()
    for edit, reason in report_interventions(spec, model, out):
        where = edit.where if edit.where is not None else SpecIssue("", f"$.interventions.{edit.name}", spec.source)
        if reason is None:
            from ..intervening import no_module

            reason = no_module(model, edit)
        found.issues.append(dataclasses.replace(where, message=reason))
    found.notes.extend(out.getvalue().splitlines())


def _named_model(document: Any, trust: bool) -> ModelSource | SpecIssue:
    """The class a spec's `model:` key names, or why there is none.

    Naming the model in a spec that `check` is given is consent to import that class's module, as
    `--model` on the command line is (docs/security.md): a `module:Class` (or `module.Class`) path imports
    its module, and a `module:function` names a factory, called with no arguments as `--model` calls one; a bare name is looked up in the spec's `imports` that may be imported, then among the
    classes transformers exports (as a checkpoint's `architectures` is). Once the class is known, the
    spec's other imports under its top-level package are allowed, as for `load_spec(for_model=...)`.
    """
    from torch import nn

    from ..spec import ImportPolicy, default_registry
    from ..spec._registry import import_module
    from ..spec._resolve import model_factory

    reference = document.data.get("model")
    if reference is None:
        message = (
            "no model to check this spec on: give --model pkg.mod:Class or --checkpoint DIR, or write the spec's `model:` key"
        )
        return SpecIssue(message, "$", document.file)
    module = reference.partition(":")[0] if ":" in reference else reference.rpartition(".")[0]
    try:
        if module:
            import_module(module, ImportPolicy(trust=True))  # consent: the spec names the model's own module
        factory = model_factory(reference)
        if factory is not None:
            return ModelSource(factory)
        policy = ImportPolicy.for_model(None, trust=trust)
        imports = [name for name in document.data.get("imports", []) if policy.allows(name)]
        try:
            return ModelSource(default_registry.resolve(reference, imports=imports, policy=policy, subclass_of=nn.Module))
        except SpecError:
            exported = None if module else _transformers_class(reference)
            if exported is None:
                raise
            return ModelSource(exported)
    except SpecError as e:
        hint = "" if module else "; or write the model as `package.module:Class`, which is consent to import its module"
        return document.issue(("model",), e.issues[0].message + hint)  # type: ignore[no-any-return]


def _transformers_class(name: str) -> type | None:
    """A model class transformers exports under `name` (importing its module), or None."""
    try:
        import transformers
    except ImportError:
        return None
    from torch import nn

    cls = getattr(transformers, name, None) if name.isidentifier() else None
    return cls if isinstance(cls, type) and issubclass(cls, nn.Module) else None


def _build(named: ModelSource, spec: Any, source: ModelSource | None, document: Any, models: Models) -> Any:
    """The model to check on; a model the spec's `model:` key names that cannot be built is that spec's
    problem, located at the key (one the command line names is a usage error)."""
    try:
        return models.get(named, spec)
    except _Usage as e:
        if source is not None:
            raise
        return document.issue(("model",), str(e))


def _check(target: Target, source: ModelSource | None, models: Models, trust: bool) -> FileResult:
    from ..spec import load_spec, validate_spec
    from ..spec._resolve import resolved_part

    if target.problem is not None:
        return FileResult(target.path, "unreadable", (target.problem,))
    try:
        document = validate_spec(Path(target.path))
    except SpecError as e:
        return FileResult(target.path, "invalid", e.issues)
    named = source or _named_model(document, trust)
    if isinstance(named, SpecIssue):
        return FileResult(target.path, "invalid", (named,))
    model = None if named.model_class() is not None else _build(named, None, source, document, models)
    if isinstance(model, SpecIssue):
        return FileResult(target.path, "invalid", (model,))
    try:
        spec = load_spec(Path(target.path), trust_imports=trust, for_model=named.model_class() or model)
    except SpecError as e:
        if model is None:
            model = _build(named, None, source, document, models)
        if isinstance(model, SpecIssue) or any(issue.json_path == "$.model" for issue in e.issues):
            # (a spec for another model: its recorders say nothing about this one)
            unmatched = [] if isinstance(model, SpecIssue) else _unmatched_patches(document, model)
            return FileResult(target.path, "invalid", (*e.issues, *unmatched))
        # The rest of the spec is checked too (what resolves), so one run reports every problem.
        rest = resolved_part(Path(target.path), trust_imports=trust, for_model=named.model_class() or model)
        found = _Findings(f"{target.path} on {type(model).__name__} (built on the meta device), what resolves:")
        found.issues.extend(e.issues)
        found.issues.extend(_unmatched_patches(document, model))
        if rest is not None:
            with _patched(rest, model, found):
                _recorders(rest, model, found)
                _interventions(rest, model, found)
        return found.result(target.path)
    if model is None:
        model = _build(named, spec, source, document, models)
    if isinstance(model, SpecIssue):
        return FileResult(target.path, "invalid", (model,))
    found = _Findings(f"{target.path} on {type(model).__name__} (built on the meta device):")
    patches = _Findings("")
    _patches(spec, model, document, patches)  # what the patches replace, on the model as built
    with _patched(spec, model, found):  # recorders and edits on the model the patches make
        _recorders(spec, model, found)
        found.notes.extend(patches.notes[1:])
        found.issues.extend(patches.issues)
        _interventions(spec, model, found)
    return found.result(target.path)


@contextlib.contextmanager
def _patched(spec: Any, model: Any, found: _Findings) -> Iterator[None]:
    """Within the block, `model` has the spec's patches (`patch_model`; undone after): a recorder of a
    submodule that only a replacement has (an eager attention's probabilities) is found. Patches that
    `patch_model` cannot apply to a built model (a replacement made only by its constructor) leave the
    recorders checked on the model as built, with a note saying so."""
    from ..errors import PatchError
    from ..patch import patch_model

    if not spec.patches:
        yield
        return
    try:
        handle = patch_model(model, spec, missing_ok=True)
    except PatchError as e:
        found.notes.append(
            f"recorders checked on the model as built: patch_model cannot apply the patches ({e.problems[0].message})"
        )
        yield
        return
    try:
        yield
    finally:
        handle.remove()


def _run_check(args: argparse.Namespace) -> int:
    try:
        source = source_from_arguments(args.model, args.config, args.checkpoint, args.model_kwargs)
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
        "--model",
        metavar="PKG.MOD:NAME",
        help="the model class, or a function that returns the model (its module is imported, the working directory "
        "first, as python -m finds it); default: each spec's model key",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="a config JSON: the config of a class with a config_class (default: its default config), else the "
        "keyword arguments to call --model with",
    )
    parser.add_argument(
        "--model-kwargs",
        metavar="JSON",
        help="keyword arguments to call --model with, a JSON object (a factory, or a class without a config_class); "
        "default: none",
    )
    parser.add_argument("--checkpoint", metavar="DIR", help="a checkpoint directory: its config.json (and architecture)")
    add_exclude(parser)
    parser.add_argument("--format", choices=sorted(REPORTERS), default="text", help="output format (default: text)")
    parser.add_argument(
        "--trust-imports",
        action="store_true",
        help="allow importing the modules the specs name (as load_spec(trust_imports=True))",
    )
    parser.set_defaults(run=_run_check)
