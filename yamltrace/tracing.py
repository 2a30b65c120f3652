"""`trace`: capture submodule outputs of any `nn.Module` for the duration of a `with` block.

The model needs no cooperation: hooks go on when the block starts and come off when it ends. Each call
of the root module is one step; the yielded mapping holds every step's captures in call order (a
single forward gives exactly the model's own `output_hidden_states` / `output_attentions` tuples).

Captures follow transformers' scopes (`engine._trace_plan`): each decorated forward of the model (or each
scope of the spec) records into its own lists and ties its last hidden state at its own exit; the
outermost scopes are what the block yields, named as `exposed_names` says (`hidden_states`, or
`encoder_hidden_states` and `decoder_hidden_states` for an encoder-decoder; a multimodal composite's
language model keeps the plain names, its vision tower's are `vision_tower_hidden_states`, ...).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Hashable, Iterable, Mapping
from itertools import repeat
from typing import Any

from torch import nn

from ._captures import Captures
from ._vocabulary import ATTENTION_WEIGHT_KEYS
from ._spec_arg import SpecLike, as_spec
from ._trace_checks import attention_weight_issues, check_recorders, dead_recorders, retarget_to_patches, warn_attention_weights
from ._trace_checks import warn_dead, warn_never_ran, warn_no_call, warn_no_tensor
from .engine import (
    EditRow,
    KeptPlan,
    ModelIndex,
    TracePlan,
    attached_spec,
    decorated_paths,
    keep_plan,
    kept_plan,
    normalized_tasks,
    own_output_map,
)
from .engine import TraceScope as _Scope
from .engine import TraceRun, plan_trace, unwrap
from .errors import SpecError
from .intervening import BlockEdits, planned_edits, report_never_ran, start_edits
from .spec import Spec, load_spec
from .spec._patch_rule import model_device, swap_pairs

__all__ = ["trace", "plan", "Captures", "SpecLike"]


def _model_scopes(model: nn.Module, index: ModelIndex) -> list[_Scope]:
    """The scopes of a model traced without a spec: its decorated forwards, else the root's own map."""
    decorated = decorated_paths(model, index)
    if decorated:
        return [
            _Scope(number, path, model.get_submodule(path), normalized_tasks(_map_of(model.get_submodule(path))), True, {})
            for number, path in enumerate(decorated)
        ]
    own = _map_of(model)
    if not own:
        raise ValueError(
            f"{type(model).__name__} declares no _can_record_outputs; pass trace(model, spec) with a Spec, "
            "a spec file or a {key: recorder} dict."
        )
    return [_Scope(0, "", model, normalized_tasks(own), True, {})]


def _map_of(module: nn.Module) -> Mapping[str, Any]:
    own = own_output_map(module)
    return own if isinstance(own, Mapping) else {}


def _spec_scopes(model: nn.Module, spec: Spec, root_tasks: Any, strict: bool) -> list[_Scope]:
    """The scopes a spec declares: the root (its top-level `outputs`) and each of its `scopes`."""
    scopes = []
    for section in spec.sections():
        if not section.scope:
            scopes.append(_Scope(0, "", model, tuple(root_tasks), False, dict(spec.options)))
            continue
        path, scope = section.scope, spec.scopes[section.scope]
        try:
            module = model.get_submodule(path)
        except AttributeError:
            if strict and any(not r.optional for rs in scope.outputs.values() for r in rs):
                check_recorders(model, spec, {path: None})  # raises, located at the scope's recorders
            continue
        tasks = tuple((key, r) for key, recorders in scope.outputs.items() for r in recorders)
        scopes.append(_Scope(len(scopes), path, module, tasks, False, {**spec.options, **scope.options}))
    return scopes


def _resolve(
    model: nn.Module, spec: SpecLike | None, strict: bool, index: ModelIndex
) -> tuple[list[_Scope], Spec | None, Spec | None]:
    """The scopes `trace` records for its `spec` argument, the explicit spec (None without one), and the
    spec the block follows (the explicit or the attached one; None for the model's own maps)."""
    if spec is None:
        attached = attached_spec(model)
        if attached is None:
            return _model_scopes(model, index), None, None
        # from_pretrained set the attached spec's top-level map on the instance, retargeted to patched
        # classes, and applied its patches: its scopes are retargeted the same way here.
        followed = retarget_to_patches(model, attached)
        return _spec_scopes(model, followed, normalized_tasks(_map_of(model)), strict=False), None, followed
    spec = as_spec(model, spec)
    root_tasks = tuple((key, r) for key, recorders in spec.outputs.items() for r in recorders)
    return _spec_scopes(model, spec, root_tasks, strict), spec, spec


class _AttentionReads:
    """What the attention-weight check (`attention_weight_issues`) read: the `_attn_implementation` of
    each module's nearest config. `holds()` while every module keeps its `config` and every config its
    implementation (a sub-config's too), so a kept plan warns as planning again would."""

    __slots__ = ("_dicts", "_configs", "_distinct", "_implementations")

    def __init__(self, index: ModelIndex) -> None:
        self._dicts = [module.__dict__ for _, module in index.named() if "config" in module.__dict__]
        self._configs = [own["config"] for own in self._dicts]
        self._distinct = list({id(config): config for config in self._configs}.values())
        self._implementations = self._read()

    def _read(self) -> list[Any]:
        return [getattr(config, "_attn_implementation", None) for config in self._distinct]

    def holds(self) -> bool:
        return list(map(dict.get, self._dicts, repeat("config"))) == self._configs and self._read() == self._implementations


def _attention_reads(index: ModelIndex, spec: Spec) -> _AttentionReads | None:
    """What a kept plan of `spec` must read again for the attention-weight check: nothing when the spec
    captures no attention weights."""
    keys = {key for section in spec.sections() for key in section.outputs}
    return _AttentionReads(index) if ATTENTION_WEIGHT_KEYS.intersection(keys) else None


def plan(
    model: nn.Module,
    spec: SpecLike | None = None,
    *,
    outputs: str | Iterable[str] | None = None,
    strict: bool = True,
    values: Mapping[str, Any] | None = None,
) -> TracePlan:
    """What `trace(model, spec, outputs=..., strict=..., values=...)` would hook, record and tie,
    without installing anything or running a forward: its scopes, the names it yields, the hooks and
    layer selections of each scope (`engine.TracePlan`). Raises what `trace` raises before its block
    runs, the spec's interventions and their `values` checked too: the way to check a spec against a
    model without a block (a block that never calls the model warns that it recorded nothing).

    `model` is the module inside any DDP, FSDP or torch.compile wrapper (`trace` unwraps it first).
    The plan is kept on the model: called again with the same arguments on an unchanged model, it
    returns the same plan (`engine._plans` says what "unchanged" covers).
    """
    kept = _kept(model, spec, outputs, strict)
    _edit_rows(model, kept.spec, values, strict)
    return kept.plan


def _edit_rows(model: nn.Module, explicit: Spec | None, values: Mapping[str, Any] | None, strict: bool) -> list[EditRow]:
    """The edits of a block with spec `explicit` and `values` (`planned_edits`): none without interventions or values."""
    if values or explicit and explicit.interventions:
        return planned_edits(model, explicit or Spec(outputs={}), values, strict=strict)
    return []


def _kept(model: nn.Module, spec: SpecLike | None, outputs: str | Iterable[str] | None, strict: bool) -> KeptPlan:
    """The plan of `plan(...)` and its explicit spec: the ones kept on the model for these arguments,
    else planned now and kept. What planning warns about, it warns about for every block."""
    if outputs is not None and not isinstance(outputs, str):
        outputs = tuple(outputs)
    if type(spec) is not dict and isinstance(spec, (str, os.PathLike)):  # (a dict first: ABC checks call Python)
        spec = load_spec(spec, for_model=model)  # (the same Spec while the file is unchanged)
    key = _plan_key(model, spec, outputs, strict)
    kept = None if key is None else kept_plan(model, key)
    if kept is not None and isinstance(spec, Spec) and kept.spec is not spec and kept.spec.locations != spec.locations:
        kept = None  # an equal spec written at other lines of its file: what planning reports is located anew
    if kept is None:
        index = ModelIndex(model)  # the one walk planning and its checks read
        scopes, explicit, followed = _resolve(model, spec, strict, index)
        planned = plan_trace(model, scopes, outputs, index)
        chosen = _chosen(planned, outputs)
        dead = [] if explicit is None else _dead_recorders(model, explicit, scopes, chosen, strict, index)
        weights = [] if followed is None else attention_weight_issues(model, followed, checked=chosen, index=index)
        checks = None if followed is None else _attention_reads(index, followed)
        kept = keep_plan(model, key, index, planned, scopes, (dead, weights, followed), explicit, checks)
    dead, weights, followed = kept.warnings
    if dead:
        warn_dead(dead, stacklevel=4)  # warn_dead, _kept, __enter__ (or plan), the caller
    if weights:
        warn_attention_weights(model, followed, stacklevel=3, issues=weights)  # above _kept: __enter__ (or plan), the caller
    return kept


def _chosen(planned: TracePlan, outputs: str | Iterable[str] | None) -> Callable[[str, str], bool]:
    """Whether the block records a key of a scope (`checked(scope path, key)`): every key, or with
    `outputs` the chosen ones; what the plan-time checks look at."""
    wanted = {output.name for output in planned.outputs}

    def checked(path: str, key: str) -> bool:
        return outputs is None or planned.names.get((path, key)) in wanted

    return checked


def _dead_recorders(
    model: nn.Module, spec: Spec, scopes: list[_Scope], checked: Callable[[str, str], bool], strict: bool, index: ModelIndex
) -> list[Any]:
    """The dead recorders of an explicit spec among the keys the block records (a `SpecError` with `strict`)."""
    issues = dead_recorders(model, spec, {s.path: s.module for s in scopes}, checked=checked, index=index)
    if issues and strict:
        raise SpecError(issues)
    return issues


def _plan_key(model: nn.Module, spec: Any, outputs: Any, strict: bool) -> Hashable:
    """What a block's plan is built from besides the model's structure and configs (`engine._plans`),
    by content: a spec compares by what it declares (and the file it names, which its warnings
    locate), never by identity; None for what is planned every time (a spec document given as a
    mapping, an argument `plan` refuses)."""
    if spec is None:
        attached = attached_spec(model)
        what: Hashable = ("model", normalized_tasks(_map_of(model)), attached, None if attached is None else attached.source)
        patches = attached is not None and bool(attached.patches)
    elif isinstance(spec, Spec):
        what, patches = ("spec", spec, spec.source), bool(spec.patches)
    elif (type(spec) is dict or isinstance(spec, Mapping)) and "yamltrace" not in spec and "interventions" not in spec:
        what, patches = ("dict", normalized_tasks(spec)), False
    else:
        return None
    device = model_device(model) if patches else None
    # (The attention implementations the attention-weight check read are the kept plan's `checks`.)
    return (what, swap_pairs(model), device, outputs, strict)


def trace(
    model: nn.Module,
    spec: SpecLike | None = None,
    *,
    outputs: str | Iterable[str] | None = None,
    strict: bool = True,
    values: Mapping[str, Any] | None = None,
) -> contextlib.AbstractContextManager[Captures]:
    """Capture the outputs a spec declares while the block runs; yields a read-only `key -> tuple` map.

    Args:
        model: any `nn.Module`; it does not need to declare anything.
        spec: a `Spec`, a spec file path, or a `_can_record_outputs`-style dict. `None` uses the spec
            attached by `from_pretrained`, else the capture maps of the model's decorated forwards
            (each records its own captures, as transformers does), else the root's own map.
        outputs: the keys to capture (default: every key).
        strict: with an explicit spec, a recorder that matches no module of the model is a `SpecError`
            located at the recorder (unless marked `optional`), and an intervention whose modules exist
            but never ran in the block's calls of the model a `CaptureError` when the block ends;
            `strict=False` makes them warnings. (A key whose modules never ran is a `NeverRanWarning`.)
        values: the tensors of the spec's `{value: NAME}` interventions, as `intervene` takes them.

    Yields:
        `Captures`: a read-only mapping `key -> tuple`, all calls of `model` in the block concatenated
        (`captures.steps` keeps them apart), complete when the block exits. Each value knows its module:
        `captures.paths(key)`, `captures.by_path(key)`, `captures.stack(key)`.

    Raises:
        SpecError: the spec cannot be read or resolved, a recorder matches no module (strict), or the
            spec has patches the model does not have applied yet (apply them with `patch_model`).
        KeyError: a key in `outputs` that the spec does not declare (the message lists the known keys).
        ValueError: `spec=None` on a model that declares no capture map.
        CaptureError: during the block, a recorder cannot take what it asks for (an index past a
            module's tuple output, token positions out of range).

    A spec with `interventions` applies them for the block, as `intervene` does: captures record the
    edited values. Hooks exist only inside the block, record only calls made in the context (thread)
    that entered it, and are removed even if the block raises. `model` may be the module `torch.compile` returned, or
    the original of a compiled module, before or after its first compiled call (see docs/capture.md).

    Example:
        >>> import torch, yamltrace
        >>> from yamltrace.examples.tiny import TinyConfig, TinyDecoderLayer, TinyModel
        >>> model = TinyModel(TinyConfig()).eval()
        >>> with torch.no_grad(), yamltrace.trace(model, {"hidden_states": TinyDecoderLayer}) as captures:
        ...     _ = model(torch.randint(0, 128, (1, 8)))
        >>> len(captures["hidden_states"])  # the embeddings, then one per layer (the last tied post-norm)
        5
    """
    return _Block(model, spec, outputs, strict, values)


class _Block:
    """One `with trace(...)` block: planned (or its kept plan found) and installed at `__enter__`,
    removed at `__exit__`, also when the block raises. Entered again while open, it opens a block
    inside (each entry has its own run)."""

    __slots__ = ("_outer", "_spec", "_outputs", "_strict", "_values", "_open")

    def __init__(self, outer: nn.Module, spec: Any, outputs: Any, strict: bool, values: Mapping[str, Any] | None) -> None:
        # Steps are calls of `outer` (a DDP, FSDP or torch.compile wrapper, or the model); all else sees the model inside.
        self._outer, self._spec, self._outputs, self._strict, self._values = outer, spec, outputs, strict, values
        self._open: list[_Opened] = []  # one per entry

    def __enter__(self) -> Captures:
        model = unwrap(self._outer)
        kept = _kept(model, self._spec, self._outputs, self._strict)  # (what it warns about names the caller's line)
        rows = _edit_rows(model, kept.spec, self._values, self._strict)
        opened = _Opened(kept.run(), self._outer, model, self._strict)
        self._open.append(opened)  # (first: an interrupted start is still closed)
        run = opened.run
        try:
            if rows:  # edited values are what the block's captures record
                opened.edits = start_edits(opened.stack, rows, run.session, self._outer)
            run.start(self._outer)
            return Captures(run.lists, run.ends, run.paths, model)
        except BaseException:
            self._open.pop()
            _close(opened, failed=True)
            raise

    def __exit__(self, kind: Any, error: Any, traceback: Any) -> None:
        _close(self._open.pop(), failed=kind is not None)


class _Opened:
    """One entry of a block: its run, the stack its edits are removed by, the module whose calls are
    steps, the model inside any wrapper, `strict`, and its edits (None without)."""

    __slots__ = ("run", "stack", "outer", "model", "strict", "edits")

    def __init__(self, run: TraceRun, outer: nn.Module, model: nn.Module, strict: bool) -> None:
        self.run, self.stack, self.outer, self.model, self.strict = run, contextlib.ExitStack(), outer, model, strict
        self.edits: BlockEdits | None = None


def stepwise(
    model: nn.Module,
    spec: SpecLike | None = None,
    *,
    outputs: str | Iterable[str] | None = None,
    strict: bool = True,
    values: Mapping[str, Any] | None = None,
) -> _Stepwise:
    """A `trace` block read call by call, for a loop that runs the model many times and wants each
    call's captures apart (`extract`): in `with stepwise(...) as steps:`, `steps.take()` returns what
    the calls of the model finished since the last `take` captured (`key -> tuple`, as the block's
    `Captures` would give it) and forgets it, so the block holds one call's captures at a time.
    Arguments and errors as `trace`'s. One block for the whole loop installs its hooks once, where a
    block per call installs and removes them every time (figures: docs/performance.md, Extraction).
    """
    return _Stepwise(model, spec, outputs, strict, values)


class _Stepwise(_Block):
    """The block of `stepwise`: `take()` (its value) and `skip()` (forget what was recorded so far)."""

    __slots__ = ()

    def __enter__(self) -> _Stepwise:  # type: ignore[override]
        super().__enter__()
        return self

    def __exit__(self, kind: Any, error: Any, traceback: Any) -> None:
        _close(self._open.pop(), failed=kind is not None, called=False)  # (a loop may run no step: `take` says so)

    def take(self) -> dict[str, tuple[Any, ...]]:
        """The captures of the calls finished since the last `take` (or `skip`), which the block forgets;
        an output whose modules gave no tensor warns, as at the end of a `trace` block, and so does a
        `take` after no call of the model."""
        opened = self._open[-1]
        run = opened.run
        if not run.ends and run.lists:
            warn_no_call(opened.outer, run.lists, taken=True, stacklevel=3)
        elif run.ends and (silent := run.silent_outputs()):
            warn_no_tensor(opened.model, silent)
        return run.take()

    def skip(self) -> None:
        """Forget what the block recorded so far (calls the loop did not make itself)."""
        run = self._open[-1].run
        if run.ends:
            run.take()


def _close(opened: _Opened, failed: bool, called: bool = True) -> None:
    """End a block: stop its run, remove its edits, and (for a block that did not raise) say that it
    recorded nothing because it never called the traced module (unless not `called` for), or which outputs recorded no tensor,
    which recorded nothing because their modules never ran (both a `NeverRanWarning`), and which
    interventions edited nothing because theirs never ran (an error if strict)."""
    run = opened.run
    try:
        run.stop()
    finally:
        opened.stack.close()
    if failed:
        return
    if called and not run.calls and run.lists:
        warn_no_call(opened.outer, run.lists)
    if not run.ends:
        return
    steps = len(run.ends)
    if silent := run.silent_outputs():
        warn_no_tensor(opened.model, silent)  # (stack: here, __exit__, the caller)
    if idle := run.never_ran():
        warn_never_ran(idle, steps)
    if opened.edits is not None:
        report_never_ran(opened.edits, steps, opened.strict, stacklevel=4)
