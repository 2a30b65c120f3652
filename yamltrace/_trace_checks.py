"""What `trace` checks so that no capture is silently empty: dead recorders, unapplied patches, no tensor.

- `check_recorders`: every non-optional recorder of an explicit spec hooks at least one module of its
  scope; otherwise a `SpecError` located at the recorder (file:line), naming the closest classes or
  module paths (a warning with `strict=False`).
- `check_patches`: `trace` does not apply a spec's patches; a spec whose patches would still replace a
  module of the model is an error saying how to apply them (`patch_model`, `from_pretrained`).
- `attention_weight_issues`: a recorder of attention weights (docs/vocabulary.md) on modules whose
  attention implementation computes none (SDPA, flash) is a located warning before anything runs.
- `warn_no_tensor`: a key whose modules ran but returned `None` where the recorder reads (attention
  weights under SDPA) warns once per model, naming `attn_implementation="eager"`.
- `warn_never_ran`: a key whose modules exist but never ran in a block's calls (a fused path skips
  them, or compiled code runs no hooks) warns once per block, naming the modules and both causes.
"""

from __future__ import annotations

import dataclasses
import difflib
import warnings
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from torch import nn

from ._vocabulary import ATTENTION_WEIGHT_KEYS, returns_no_attention_weights
from .engine import ModelIndex, OutputRecorder, scope_modules
from .errors import CaptureError, NeverRanWarning, SpecError, SpecIssue
from .spec import PatchEntry, Spec
from .spec._patch_rule import PatchRule, model_device, model_swaps, retarget_spec

__all__ = [
    "check_recorders",
    "dead_recorders",
    "warn_dead",
    "check_patches",
    "patch_targets",
    "retarget_to_patches",
    "spec_rule",
    "warn_never_ran",
    "warn_no_tensor",
    "warn_attention_weights",
    "attention_weight_issues",
    "nearest_config",
    "dead_hints",
]


def _closest(word: str, choices: Iterable[str]) -> list[str]:
    return difflib.get_close_matches(word, sorted(set(choices)), n=3, cutoff=0.5)


def dead_hints(recorder: OutputRecorder, modules: list[tuple[str, nn.Module]]) -> str:
    """The closest module classes (for a target class) or path suffixes (for a class_name) in a scope."""
    if recorder.target_class is not None:
        classes = {type(m).__name__: type(m) for _, m in modules}
        close = list(
            dict.fromkeys(
                # A class of the same name (another module's `Linear`) is named with its module, and the target's beside it.
                _qualified(classes[c]) + f" (not {_qualified(t)})" if c == t.__name__ and classes[c] is not t else c
                for t in recorder.target_classes
                for c in _closest(t.__name__, list(classes))
            )
        )
        return f"; closest classes: {', '.join(close)}" if close else ""
    name = (recorder.class_name or "").strip(".")
    classed = [p for p, m in modules if type(m).__name__ == name]
    if classed:
        return (
            f"; {name} is the class of {classed[0]}{' and others' if len(classed) > 1 else ''}: a class_name (a plain "
            f"string in a dict spec) is a module path suffix; to hook by class, write {{target: {name}}} (the class)"
        )
    suffixes = {"." + ".".join(p.split(".")[-n:]) for p, _ in modules if p for n in (1, 2)}
    close = _closest(recorder.class_name or "", suffixes)
    return f"; closest module paths: {', '.join(close)}" if close else ""


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _describe(recorder: OutputRecorder) -> str:
    what = (
        f"class {' | '.join(t.__name__ for t in recorder.target_classes)}"
        if recorder.target_class is not None
        else f"path suffix {recorder.class_name!r}"
    )
    return what + (f" with layer_name {recorder.layer_name!r}" if recorder.layer_name else "")


def _spec_sections(spec: Spec) -> list[tuple[str, Mapping[str, tuple[OutputRecorder, ...]]]]:
    return [(section.scope, section.outputs) for section in spec.sections()]


def check_recorders(
    model: nn.Module,
    spec: Spec,
    present: Mapping[str, Any],
    *,
    strict: bool = True,
    checked: Callable[[str, str], bool] | None = None,
) -> None:
    """Raise (or warn, with `strict=False`) when a non-optional recorder of `spec` matches no module
    (`dead_recorders`)."""
    issues = dead_recorders(model, spec, present, checked=checked)
    if issues and strict:
        raise SpecError(issues)
    if issues:
        warn_dead(issues, stacklevel=5)


def warn_dead(issues: list[SpecIssue], stacklevel: int = 4) -> None:
    """The warning of `check_recorders` with `strict=False` (a kept plan gives it again for each block)."""
    warnings.warn(str(SpecError(issues)), stacklevel=stacklevel)


def dead_recorders(
    model: nn.Module,
    spec: Spec,
    present: Mapping[str, Any],
    *,
    checked: Callable[[str, str], bool] | None = None,
    index: ModelIndex | None = None,
) -> list[SpecIssue]:
    """The non-optional recorders of `spec` that match no module, each a located issue.

    `present` maps each scope path to its module, or to None when the model has no such submodule;
    `checked(scope, key)`, when given, says which keys to check; `index`: the model's walk, if the
    caller has it.
    """
    index = ModelIndex(model) if index is None else index
    paths = [p for p, _ in _spec_sections(spec)]
    issues = []
    for scope, outputs in _spec_sections(spec):
        if scope not in present:
            continue
        modules = None if present[scope] is None else scope_modules(model, scope, paths, index)
        for key, recorders in outputs.items():
            if checked is not None and not checked(scope, key):
                continue
            for position, recorder in enumerate(recorders):
                if recorder.optional:
                    continue
                if modules is None:
                    close = _closest(scope, (p for p, _ in model.named_modules() if p))
                    hint = f"; closest module paths: {', '.join(close)}" if close else ""
                    message = f"{type(model).__name__} has no submodule {scope!r}, so the scope's recorders record nothing{hint}"
                elif any(recorder.matches(module, path) for path, module in modules):
                    continue
                else:
                    where = f" under {scope!r}" if scope else ""
                    message = (
                        f"output {key!r}: the recorder of {_describe(recorder)} matches no module of "
                        f"{type(model).__name__}{where}{dead_hints(recorder, modules)}"
                    )
                message += ". Fix the recorder, mark it `optional: true` if the module exists only in some configurations, or trace with strict=False."
                issues.append(dataclasses.replace(spec.where(scope, key, position), message=message))
    return issues


def spec_rule(model: nn.Module, spec: Spec) -> PatchRule:
    """The rule of the spec's patches on the model's device (entries for other devices take no part)."""
    return PatchRule.for_entries(spec.patches, model_device(model))


def patch_targets(model: nn.Module, entries: Sequence[PatchEntry]) -> list[tuple[PatchEntry, list[str]]]:
    """For each patch entry (a spec's `patches`), the paths of the modules it replaces, as `patch_model`
    selects them on the CPU or on a device an entry names (an entry for `cuda` is judged on `cuda`)."""
    devices = sorted({"cpu", *(e.device for e in entries if e.device)})
    rules = [PatchRule.for_entries(entries, device) for device in devices]
    targets: dict[str, list[str]] = {e.pattern: [] for e in entries}
    for path, module in model.named_modules():
        for key in {rule.key_for(type(module).__name__) for rule in rules} - {None}:
            targets[str(key)].append(path or "<root>")
    return [(entry, targets[entry.pattern]) for entry in entries]


def check_patches(model: nn.Module, spec: Spec) -> None:
    """`SpecError` when the spec's patches would still replace modules of the model (trace applies none)."""
    rule = spec_rule(model, spec)
    if not rule:
        return
    issues = []
    for path, module in model.named_modules():
        key = rule.key_for(type(module).__name__)
        if key is None or isinstance(module, rule.mapping[key]):
            continue
        issues.append(
            SpecIssue(
                f"trace does not apply a spec's patches, and {path or '<root>'} ({type(module).__name__}) would "
                f"become {rule.mapping[key].__name__}. Apply them first: `handle = yamltrace.patch_model(model, spec)` "
                "(undo with `handle.remove()`), or load the model with `yamltrace.from_pretrained(cls, path, spec=spec)`.",
                f"$.patches[{key!r}]",
                spec.source,
            )
        )
    if issues:
        raise SpecError(issues[:1] if len({i.json_path for i in issues}) == 1 else issues)


def retarget_to_patches(model: nn.Module, spec: Spec) -> Spec:
    """The spec with its recorders (root and every scope) retargeted to the model's own swaps (whatever
    patched it) and to the spec's patches on the model's device, as `patch_output_recorders` retargets
    a model's own maps (the model is patched: `check_patches`)."""
    return retarget_spec(spec, PatchRule(spec_rule(model, spec).mapping, model_swaps(model)))


_warned: weakref.WeakSet[nn.Module] = weakref.WeakSet()


def warn_no_tensor(model: nn.Module, lists: Mapping[str, list[Any]]) -> None:
    """Warn (once per model) when a key's modules ran but none returned a tensor where it reads."""
    empty = [name for name, values in lists.items() if all(v is None for v in values)]
    if not empty or model in _warned:
        return
    _warned.add(model)
    warnings.warn(
        f"trace: {', '.join(map(repr, empty))} recorded no tensor although the modules ran: they returned None where "
        "the recorder reads (attention weights under SDPA or flash attention are not computed). Load the model with "
        'attn_implementation="eager" (or set `model.config._attn_implementation = "eager"`) to capture them.',
        stacklevel=4,
    )


def never_ran_message(idle: Mapping[str, tuple[str, ...]], steps: int, *, edits: bool = False) -> str:
    """Why outputs recorded nothing (`edits`: interventions edited nothing): their modules, which
    exist, never ran in the block's calls (`steps` of the model; 0 where they are not counted)."""
    listed = "; ".join(
        f"{name!r} ({', '.join(p.lstrip('.') or '<root>' for p in paths[:4])}{', ...' if len(paths) > 4 else ''})"
        for name, paths in idle.items()
    )
    calls = f"{steps} call(s) of the model" if steps else "calls of the model"
    return (
        f"{listed}: {'edited' if edits else 'recorded'} nothing, because these modules exist but did not run in "
        f"the block's {calls}. A path of the model may skip them (a fused kernel that never calls a dropout or "
        "softmax module: switch to the eager path), or the calls ran code compiled before the block, which runs "
        "no hooks added later (compile under `torch._dynamo.config.patch(skip_nnmodule_hook_guards=False)`, or "
        "make the compiled model's first call inside a block)."
    )


def warn_never_ran(idle: Mapping[str, tuple[str, ...]], steps: int, *, edits: bool = False, stacklevel: int = 4) -> None:
    """Warn (once per block) that outputs recorded nothing (a `NeverRanWarning`), or interventions
    edited nothing, because their modules, which exist, never ran."""
    message = f"{'intervene' if edits else 'trace'}: {never_ran_message(idle, steps, edits=edits)}"
    warnings.warn(message, UserWarning if edits else NeverRanWarning, stacklevel=stacklevel)


def warn_no_call(outer: nn.Module, names: Iterable[str], *, taken: bool = False, stacklevel: int = 4) -> None:
    """Warn (a `NeverRanWarning`) that a block ended without a finished call of the module it traces
    (`taken`: that a stepwise block's `take` found none since the last one), so the outputs `names`
    recorded nothing."""
    name = type(outer).__name__
    what = (
        f"no call of the {name} it traces finished since the last take"
        if taken
        else f"the block ended without a call of the {name} it traces"
    )
    warnings.warn(
        f"trace: {what}, so {', '.join(map(repr, names))} recorded nothing. Call that {name} itself inside the block: "
        f"`{name}.forward(...)` called directly runs none of its hooks (call the module), and calls of another "
        "module are not recorded (a copy of it; a module inside it, whose calls are not steps: trace that module "
        "instead). To check a spec against a model without running it, call `yamltrace.tracing.plan`.",
        NeverRanWarning,
        stacklevel=stacklevel,
    )


def warn_no_edit(model: nn.Module, paths: Mapping[str, tuple[str, ...]]) -> None:
    """Warn (a `NeverRanWarning`) that an `intervene` block ended with none of its interventions
    (`paths`: name -> edited modules) having edited anything: none of their modules ran."""
    name = type(model).__name__
    warnings.warn(
        f"intervene: no intervention edited anything in the block ({', '.join(map(repr, paths))}): none of the "
        f"modules they edit ran. Call the {name} the block was given inside it: a copy of it is not edited, and "
        "code torch.compile compiled before the block runs no hook added later (compile under "
        "`torch._dynamo.config.patch(skip_nnmodule_hook_guards=False)`, or make the compiled model's first call "
        "inside a block).",
        NeverRanWarning,
        stacklevel=4,
    )


def raise_never_ran(idle: Mapping[str, tuple[str, ...]], steps: int) -> None:
    """`warn_never_ran`'s problem of interventions as an error (a block with `strict=True`)."""
    raise CaptureError(f"yamltrace: {never_ran_message(idle, steps, edits=True)} Pass strict=False to warn instead.")


def nearest_config(modules: Mapping[str, nn.Module], path: str) -> Any:
    """The `config` nearest to the module at `path` (its own, then its parents'; a tower's in a
    composite model), None when no module on the way has one. `modules`: `dict(model.named_modules())`."""
    parts = path.split(".") if path else []
    for n in range(len(parts), -1, -1):
        config = getattr(modules.get(".".join(parts[:n])), "config", None)
        if config is not None:
            return config
    return None


def _weightless_fix(spec: Spec, implementation: str) -> str:
    if spec.options.get("attn_implementation") == "eager":
        return (
            f"the spec states attn_implementation 'eager', but this model was built with {implementation!r}: load it "
            'with yamltrace.from_pretrained(cls, path, spec=spec), or call model.set_attn_implementation("eager")'
        )
    return (
        "add `options: {attn_implementation: eager}` to the spec (yamltrace.from_pretrained then builds the model "
        'with it), or switch this model: model.set_attn_implementation("eager")'
    )


def attention_weight_issues(
    model: nn.Module, spec: Spec, *, checked: Callable[[str, str], bool] | None = None, index: ModelIndex | None = None
) -> list[SpecIssue]:
    """One located issue per recorder of attention weights whose modules compute none (sdpa, flash);
    `checked(scope, key)`, when given, says which keys are recorded (the others are not looked at);
    `index`: the model's walk, if the caller has it."""
    paths = [p for p, _ in _spec_sections(spec)]
    index = ModelIndex(model) if index is None else index
    named = dict(index.named())
    issues = []
    for scope, outputs in _spec_sections(spec):
        if scope not in named:
            continue
        modules = scope_modules(model, scope, paths, index)
        for key in ATTENTION_WEIGHT_KEYS.intersection(outputs):
            if checked is not None and not checked(scope, key):
                continue
            for position, recorder in enumerate(outputs[key]):
                hooked = [scope + path if scope else path[1:] for path, m in modules if recorder.matches(m, path)]
                implementations = [(p, getattr(nearest_config(named, p), "_attn_implementation", None)) for p in hooked]
                silent = [(p, str(i)) for p, i in implementations if returns_no_attention_weights(i)]
                if not silent:
                    continue
                path, implementation = silent[0]
                message = (
                    f"output {key!r} captures attention weights, but {type(named[path]).__name__} at {path} runs "
                    f"attn_implementation {implementation!r}, which computes none, so the capture is empty. Fix: "
                    f"{_weightless_fix(spec, implementation)}."
                )
                issues.append(dataclasses.replace(spec.where(scope, key, position), message=message))
    return issues


def warn_attention_weights(model: nn.Module, spec: Spec, *, stacklevel: int, issues: list[SpecIssue] | None = None) -> None:
    """Warn, located, when the spec captures attention weights that the model's attention computes none of
    (then `warn_no_tensor` says nothing more for this model); `issues`: those found before (a kept plan)."""
    issues = attention_weight_issues(model, spec) if issues is None else issues
    if issues:
        _warned.add(model)
        warnings.warn(str(SpecError(issues)), stacklevel=stacklevel + 1)
