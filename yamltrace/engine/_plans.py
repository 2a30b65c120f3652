"""The one cache: plans of `trace` blocks, kept on their model, so a block on the same model and
arguments as an earlier one reuses its plan instead of planning again (planning reads the whole
model and runs the spec checks; a kept plan is one structure check).

A kept plan is reused only while it is what planning again would give (this module holds the rule):
- its key is equal: the caller (`tracing`) builds it from the *content* of everything the plan was
  built from besides the model's structure and configs (the spec or the model's own map, the
  attached spec, the model's swaps and device, `outputs`, `strict`); never from object identity;
- the model's structure is unchanged: the `_plan.PlanGuard` of the walk the plan was made from
  (`_plan.ModelIndex`, every module of the model)
  (a module added, removed, replaced or moved, by the container methods or `_modules` by hand, a
  class reassigned, a patch applied, `invalidate()`);
- what it read from configs would be read the same (`_trace_plan.stale`: tie-last settings, layer
  counts of negative `layers`), and so would what the caller's checks read (`checks`: the attention
  implementations the attention-weight check of `tracing` read).
Otherwise it is dropped and the caller plans again. What planning found wrong but only warned about
(`strict=False`) is kept with the plan, so each block warns as the first did.

The plans are kept in the model's own `__dict__` (they hold its modules, so a cache outside the model
would keep it alive); a deep copy or a pickle of the model carries an empty cache, and a shallow copy
(another object sharing the `__dict__`'s values) finds a cache that is not its own and ignores it.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Hashable, Sequence
from typing import Any

from torch import nn

from ._plan import ModelIndex
from ._padding import plan_watch
from ._trace_plan import Scope, TracePlan, config_reads, stale
from ._trace_run import TraceRun

__all__ = ["KeptPlan", "kept_plan", "keep_plan", "forget_plans"]

# Where a model keeps its plans, and how many (the least recently kept goes first).
ATTRIBUTE = "_yamltrace_trace_plans"
MAX_PLANS = 8


class KeptPlan:
    """A plan kept on its model: its key, the structure guard, the plan and the scopes it was planned
    from, the issues planning reported as warnings, the explicit spec (None without one), what the
    caller's checks read, what the plan read from configs (`_trace_plan.config_reads`)."""

    __slots__ = ("key", "guard", "plan", "scopes", "warnings", "spec", "checks", "reads", "padding")

    def __init__(
        self,
        key: Hashable,
        guard: Any,
        plan: TracePlan,
        scopes: Sequence[Scope],
        warnings: Any,
        spec: Any,
        checks: Any = None,
    ) -> None:
        self.key, self.guard = key, guard
        self.plan, self.scopes, self.warnings, self.spec = plan, tuple(scopes), warnings, spec
        self.checks = checks  # what the caller's checks read (`holds()`: still read the same), or None
        reads = config_reads(plan, self.scopes)
        self.reads = reads if reads.ties or reads.selections else None  # None: nothing to read again
        self.padding = plan_watch(plan)  # (derived from the plan alone: each run of it shares it)

    def run(self) -> TraceRun:
        """A new run of the plan, for one block."""
        return TraceRun(self.plan, self.padding)


class _Plans:
    """A model's kept plans, newest first, and the model they belong to (weakly)."""

    __slots__ = ("owner", "kept", "lock")

    def __init__(self, owner: nn.Module) -> None:
        self.owner = weakref.ref(owner)
        self.kept: list[KeptPlan] = []
        self.lock = threading.Lock()

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return {}  # a copy of the model plans for itself

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, ())  # unpickled without yamltrace, as an empty dict (ignored)


def _plans(model: nn.Module) -> _Plans | None:
    plans = model.__dict__.get(ATTRIBUTE)
    return plans if type(plans) is _Plans and plans.owner() is model else None


def kept_plan(model: nn.Module, key: Hashable) -> KeptPlan | None:
    """The plan kept on `model` under `key` while it is still what planning again would give, else None."""
    plans = _plans(model)
    if plans is None:
        return None
    for kept in plans.kept:
        if kept.key == key:
            if (
                kept.guard.holds(model)
                and (kept.reads is None or not stale(kept.reads))
                and (kept.checks is None or kept.checks.holds())
            ):
                return kept
            with plans.lock:
                if kept in plans.kept:
                    plans.kept.remove(kept)
            return None
    return None


def keep_plan(
    model: nn.Module,
    key: Hashable,
    index: ModelIndex,
    plan: TracePlan,
    scopes: Sequence[Scope],
    warnings: Any,
    spec: Any = None,
    checks: Any = None,
) -> KeptPlan:
    """Keep `plan` (planned from `scopes` for `key`, reading `index`, the model's walk) on `model`;
    returns what `kept_plan` will return, guarded by what the walk read.
    `checks`: what the caller's checks read besides (an object whose `holds()` says it reads the same).
    A key of None is not kept (the plan is returned for its one block)."""
    if key is None:
        return KeptPlan(None, None, plan, scopes, warnings, spec, checks)
    kept = KeptPlan(key, index.guard(), plan, scopes, warnings, spec, checks)
    plans = _plans(model)
    if plans is None:
        plans = model.__dict__[ATTRIBUTE] = _Plans(model)
    with plans.lock:
        plans.kept = [kept, *(k for k in plans.kept if k.key != key)][:MAX_PLANS]
    return kept


def forget_plans(model: nn.Module) -> None:
    """Drop every plan kept on `model` (the next block plans again)."""
    if _plans(model) is not None:
        del model.__dict__[ATTRIBUTE]
