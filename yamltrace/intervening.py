"""`intervene`: edit module values of any `nn.Module` for the duration of a `with` block, as a spec's
`interventions` declare; `apply_interventions`: the same edits for every call until removed.

An intervention selects modules with a recorder's fields and rules (`engine.plan_hooks`), edits what
they return (or, with `input`, what they receive) in declaration order, and builds new tensors, so
the edit is differentiable (`engine._editing`). Within a block, only calls made in the context
(thread) that entered it are edited, as `trace` records only those; captures of a `trace` see the
edited values, and a `trace` whose spec has interventions applies them for its block.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from torch import nn

from ._run_values import check_run_values
from ._trace_checks import dead_hints, raise_never_ran, warn_never_ran, warn_no_edit
from .engine import Collector, Interception, Intervention, RuntimeValue, Session, scope_modules, unwrap
from .engine._editing import CallCheck, EditRow, edit_issue, edits_watch, install_edits, plan_edits
from .engine._padding import warning_state
from .errors import SpecError, did_you_mean
from .spec import Spec
from ._spec_arg import SpecLike, as_spec

__all__ = ["BlockEdits", "InterventionHandle", "apply_interventions", "intervene", "no_module", "planned_edits", "value_names"]

Values = Mapping[str, Any]  # `{value: NAME}` -> a tensor, or a list/tuple of one tensor per module


class InterventionHandle:
    """Edits put on a model by `apply_interventions`; `remove()` takes them off (idempotent). Also a
    context manager that removes them on exit. `paths` maps each intervention to the modules it edits."""

    def __init__(self, removers: Sequence[Callable[[], None]], paths: Mapping[str, tuple[str, ...]]) -> None:
        self._removers = removers
        self.paths = paths

    def remove(self) -> None:
        for remove in self._removers:
            remove()

    def __enter__(self) -> InterventionHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def planned_edits(model: nn.Module, spec: Spec, values: Values | None = None, *, strict: bool = True) -> list[EditRow]:
    """The edits `spec.interventions` make on `model` (the module inside any wrapper), in the order they
    apply. Raises `SpecError`, located at the intervention, for one that selects no module (a warning
    with `strict=False`), a `{value: NAME}` that `values` lacks or miscounts, or a name in `values`
    that no intervention takes."""
    check_run_values(spec, values)  # keys that are names, tensors that hold data: located in the spec
    values = values or {}
    wanted = value_names(spec)
    unknown = [name for name in values if name not in wanted]
    if unknown:
        raise SpecError.single(
            f"values names {unknown[0]!r}, which no intervention takes as {{value: NAME}}{did_you_mean(unknown[0], wanted)}.",
            "$.interventions",
            spec.source,
        )
    rows: list[EditRow] = []
    issues = []
    for iv, edits in plan_edits(model, spec.interventions, values):
        if not edits:
            issues.append(edit_issue(iv, f"{no_module(model, iv)}, or pass strict=False."))
        rows.extend(edits)
    if issues and strict:
        raise SpecError(issues)
    if issues:
        warnings.warn(str(SpecError(issues)), stacklevel=3)
    return rows


def value_names(spec: Spec) -> tuple[str, ...]:
    """The names of the spec's `{value: NAME}` interventions (what `values` must hold), in declaration order, once each."""
    return tuple(dict.fromkeys(iv.value.name for iv in spec.interventions if isinstance(iv.value, RuntimeValue)))


def no_module(model: nn.Module, iv: Intervention) -> str:
    """Why an intervention edits no module of `model`, with the fix: its selector matches none (the
    closest classes or paths), or its `layers` keep none of the modules it matches."""
    modules = scope_modules(model, "", ())
    matched = [path[1:] for path, module in modules if iv.select.matches(module, path)]
    if matched and iv.select.layers is not None:
        return (
            f"intervention {iv.name!r}: layers {list(iv.select.layers)} keep none of the {len(matched)} modules its "
            f"selector matches ({', '.join(matched[:4])}{', ...' if len(matched) > 4 else ''}); use layers from "
            f"-{len(matched)} to {len(matched) - 1}"
        )
    hint = dead_hints(iv.select, modules)
    return (
        f"intervention {iv.name!r} selects no module of {type(model).__name__}{hint}. Fix its selector "
        "(target, class_name, layer_name, layers)"
    )


def _paths(rows: Sequence[EditRow]) -> Mapping[str, tuple[str, ...]]:
    paths: dict[str, list[str]] = {}
    for row in rows:
        paths.setdefault(row.edit.iv.name, []).append(row.path.lstrip("."))
    return MappingProxyType({name: tuple(found) for name, found in paths.items()})


def apply_interventions(
    model: nn.Module, spec: SpecLike, values: Values | None = None, *, strict: bool = True
) -> InterventionHandle:
    """Put the spec's interventions on `model` for every call, in every thread, until the returned
    handle's `remove()` (what a checkpoint whose spec has interventions uses).

    `model`, `spec`, `values` and `strict` are what `intervene` takes. Raises what `planned_edits`
    raises, before anything is installed.
    """
    inner = unwrap(model)
    rows = planned_edits(inner, as_spec(inner, spec), values, strict=strict)
    owner, paths = Interception(), _paths(rows)
    try:
        _install(owner, rows, None, inner, lambda: True, [False])  # one padding warning per handle
        return InterventionHandle([owner.remove], paths)  # (in `try`: nothing stays if interrupted before)
    except BaseException:
        owner.remove()
        raise


class BlockEdits:
    """The edits of one block (`start_edits`): `paths` (intervention name -> the paths of the modules
    it edits), and which of them have applied so far (`never_ran`)."""

    __slots__ = ("rows", "paths", "ran")

    def __init__(self, rows: Sequence[EditRow]) -> None:
        self.rows, self.paths = rows, _paths(rows)
        self.ran: list[bool] = [False] * len(rows)

    def never_ran(self) -> dict[str, tuple[str, ...]]:
        """The interventions none of whose modules ran in the block's calls, with those modules' paths."""
        ran: dict[str, bool] = {}
        for row, applied in zip(self.rows, self.ran):
            ran[row.edit.iv.name] = ran.get(row.edit.iv.name, False) or applied
        return {name: self.paths[name] for name, applied in ran.items() if not applied}


def start_edits(stack: contextlib.ExitStack, rows: Sequence[EditRow], session: Session, root: nn.Module) -> BlockEdits:
    """Install `rows` for the calls `session` records (a block session); closing `stack` removes them.
    Edits with `positions` or `layers` also get the padding watch's hooks on `root`, whose calls are the
    root calls (`engine._padding`): its mask places `last` / `first`, literal positions on padding warn
    once per block, and so does an edited module of `layers` that runs twice in a call (`engine._editing.CallCheck`)."""
    edits = BlockEdits(rows)
    if rows:
        owner = Interception()
        stack.callback(owner.remove)  # (first: whatever interrupts the installation, closing removes it)
        edits.ran = _install(owner, rows, session, root, session.recording, warning_state(kind="intervention"))
    return edits


def report_never_ran(edits: BlockEdits, steps: int, strict: bool, stacklevel: int) -> None:
    """At the end of a block that ran the model: the interventions that edited nothing because their
    modules never ran (a `CaptureError` with `strict`, else a warning)."""
    idle = edits.never_ran()
    if idle and strict:
        raise_never_ran(idle, steps)
    if idle:
        warn_never_ran(idle, steps, edits=True, stacklevel=stacklevel + 1)


def _install(
    owner: Interception,
    rows: Sequence[EditRow],
    session: Session | None,
    root: nn.Module,
    active: Callable[[], bool],
    warned: list[bool],
) -> list[bool]:
    """Install `rows` (for the calls `session` records; every call with None) into `owner`, with the
    padding watch's hooks on `root` and the check of `layers` edits that run twice, where needed.
    Returns, per row, whether its edit has applied since (`install_edits`)."""
    ran = install_edits(rows, session, owner)
    check = CallCheck.of(rows)
    watch = edits_watch(rows, check is not None)
    if watch is not None:
        watch.hooks(root, active, warned, owner)
    if check is not None:
        check.install(owner)
    return ran


@contextlib.contextmanager
def intervene(
    model: nn.Module, spec: SpecLike, *, values: Values | None = None, strict: bool = True
) -> Iterator[Mapping[str, tuple[str, ...]]]:
    """Edit module values as `spec.interventions` declare, for the calls of `model` made in the block.

    Args:
        model: any `nn.Module` (or its DDP, FSDP or torch.compile wrapper).
        spec: what `trace` takes: a `Spec`, a spec file, `builtin:NAME`, or a spec document (a mapping
            with `interventions`).
        values: the tensors of `{value: NAME}` values: `NAME -> tensor` (applied to every module the
            intervention edits) or `NAME -> list/tuple` (one tensor per module, in module order).
        strict: an intervention that selects no module is a located `SpecError` (else a warning); one
            whose modules never ran in the block's calls of the model (while another's did) is a
            `CaptureError` when the block ends (else a warning). A block in which no intervention
            edited anything says so (a `NeverRanWarning`: it did not call the model, or a copy).

    Yields:
        A read-only mapping: intervention name -> the paths of the modules it edits, in order.

    Edits hold for calls made in the context (thread) that entered the block, and nothing remains
    after it, even if it raises. A value whose shape does not fit the selection is a `SpecError` at
    the call, located at the intervention.

    Example:
        >>> import torch, yamltrace
        >>> from yamltrace import OutputRecorder, Spec
        >>> from yamltrace.engine import Intervention
        >>> from yamltrace.examples.tiny import TinyConfig, TinyDecoderLayer, TinyModel
        >>> model = TinyModel(TinyConfig()).eval()
        >>> ablate = Intervention("ablate", OutputRecorder(TinyDecoderLayer, layers=(0,)), "zero")
        >>> with torch.no_grad(), yamltrace.intervene(model, Spec(outputs={}, interventions=[ablate])) as edited:
        ...     _ = model(torch.randint(0, 128, (1, 8)))
        >>> edited["ablate"]
        ('layers.0',)
    """
    inner = unwrap(model)
    rows = planned_edits(inner, as_spec(inner, spec), values, strict=strict)
    session = Session(Collector(()), block=True)
    with contextlib.ExitStack() as stack:
        edits = start_edits(stack, rows, session, model)
        stack.callback(session.exit, session.enter())
        yield edits.paths
    if any(edits.ran):  # (the model ran: an intervention that edited nothing never ran)
        report_never_ran(edits, 0, strict, stacklevel=4)
    elif edits.rows:
        warn_no_edit(model, edits.paths)
