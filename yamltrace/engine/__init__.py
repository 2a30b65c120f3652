"""The capture engine: recorders, which modules to hook (plans), what a hook records, and sessions.

Data flows one way here: `_recorder` (what to record) -> `_plan` (which modules, cached) ->
`_collector` (what the hooks record, via `_intercept`) -> `_session` (what records in this context,
the tie-last rule) -> `_held` (hooks a decorated model keeps between capturing forwards) ->
`_scopes` (which submodules keep their own captures, where they tie); `_wrappers` sees through
DDP/FSDP/compile/checkpoint wrappers. `capture_outputs` and `trace` are built on these names.
"""

from ._collector import Collector, Sessions, install_hooks
from ._held import HeldHooks, held_hooks, hold_hooks, release_hooks
from ._intercept import Interception, Listener, intercept
from ._plan import MISSING, CacheInfo, HookPlan, PlanGuard, cache_info, invalidate, own_output_map, plan_hooks
from ._recorder import CAPTURE_DTYPES, CaptureMap, OutputRecorder, RecorderLike, default_index, normalize_output_map, normalized_tasks
from ._scopes import decorated_paths, exposed_names, is_under, outermost, plain_owners, scope_label, scope_modules, tie_points
from ._selection import requested_positions, resolve_positions, resolve_selections
from ._session import (
    FLAG_ALIASES,
    NO_CAPTURE,
    Session,
    active_sessions,
    config_attribute,
    decorator_tie_last,
    plain_config_lookup,
    requested_flags,
    tie_last_enabled,
    tie_last_hidden_state,
    uncompiled,
)
from ._wrappers import logical_path, unwrap

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
    "config_attribute",
    "plain_config_lookup",
    "cache_info",
    "decorated_paths",
    "decorator_tie_last",
    "exposed_names",
    "plain_owners",
    "is_under",
    "outermost",
    "scope_label",
    "scope_modules",
    "tie_points",
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
    "logical_path",
    "unwrap",
]
