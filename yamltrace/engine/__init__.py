"""The capture engine: recorders, which modules to hook (plans), what a hook records, and sessions.

Data flows one way here: `_recorder` (what to record) -> `_plan` (which modules, cached) ->
`_collector` (what the hooks record, via `_intercept`) -> `_held` (hooks a decorated model keeps
between capturing forwards) -> `_session` (what records in this context,
the tie-last rule). `capture_outputs` and `trace` are built on these names.
"""

from ._collector import Collector, Sessions, install_hooks
from ._held import HeldHooks, held_hooks, hold_hooks, release_hooks
from ._intercept import Interception, Listener, intercept
from ._plan import MISSING, CacheInfo, HookPlan, PlanGuard, cache_info, invalidate, own_output_map, plan_hooks
from ._recorder import CAPTURE_DTYPES, CaptureMap, OutputRecorder, RecorderLike, default_index, normalize_output_map, normalized_tasks
from ._selection import requested_positions, resolve_positions, resolve_selections
from ._session import (
    FLAG_ALIASES,
    NO_CAPTURE,
    Session,
    active_sessions,
    decorator_tie_last,
    requested_flags,
    tie_last_enabled,
    tie_last_hidden_state,
    uncompiled,
)

__all__ = [
    "release_hooks",
    "hold_hooks",
    "held_hooks",
    "Sessions",
    "PlanGuard",
    "HeldHooks",
    "CAPTURE_DTYPES",
    "FLAG_ALIASES",
    "MISSING",
    "NO_CAPTURE",
    "CacheInfo",
    "CaptureMap",
    "Collector",
    "HookPlan",
    "Interception",
    "Listener",
    "OutputRecorder",
    "RecorderLike",
    "Session",
    "active_sessions",
    "cache_info",
    "decorator_tie_last",
    "default_index",
    "install_hooks",
    "intercept",
    "invalidate",
    "normalize_output_map",
    "normalized_tasks",
    "own_output_map",
    "plan_hooks",
    "requested_flags",
    "requested_positions",
    "resolve_positions",
    "resolve_selections",
    "tie_last_enabled",
    "tie_last_hidden_state",
    "uncompiled",
]
