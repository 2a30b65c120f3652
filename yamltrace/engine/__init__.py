"""The capture engine: recorders, which modules to hook (plans), what a hook records, and sessions.

Data flows one way here: `_recorder` (what to record) -> `_plan` (which modules: the walk) ->
`_collector` (what the hooks record, on torch hooks via `_intercept`, and which collector records a call) ->
`_session` (sessions in this context, flags, the tie-last rule) -> `_held` (hooks a decorated model
keeps between capturing forwards) -> `_scopes` (which submodules keep their own captures, where they
tie) -> `_trace_plan` / `_trace_run` (a `trace` block's plan, then its run) -> `_plans` (the one
cache: plans kept on the model for the next block); `_wrappers` sees
through DDP/FSDP/compile/checkpoint wrappers. The names below are what the rest of the package uses.
"""

from ._attached import attach_interventions, attach_spec, attached_spec
from ._collector import Collector, entry_of
from ._edit import OPERATIONS, Intervention, RuntimeValue
from ._editing import edited_modules
from ._heads import head_count
from ._intercept import Interception
from ._held import hold_hooks, release_hooks
from ._padding import PaddingWatch, tasks_watch
from ._padding_warning import shared_warning, warning_state
from ._plan import CAPTURE_MAP_ATTRIBUTE, invalidate, own_output_map, plan_hooks
from ._plans import KeptPlan, forget_plans, keep_plan, kept_plan
from ._recorder import CAPTURE_DTYPES, CaptureMap, OutputRecorder, default_index, normalize_output_map, normalized_tasks
from ._scopes import decorated_paths, is_under, scope_modules
from ._selection import position_counter, resolve_selections
from ._session import (
    NO_CAPTURE,
    Session,
    config_attribute,
    decorator_tie_last,
    plain_config_lookup,
    requested_flags,
    tie_last_enabled,
    tie_last_hidden_state,
)
from ._trace_plan import Scope as TraceScope
from ._trace_plan import TracePlan, plan_trace
from ._trace_run import TraceRun
from ._wrappers import unwrap

__all__ = [
    "CAPTURE_DTYPES",
    "CAPTURE_MAP_ATTRIBUTE",
    "CaptureMap",
    "Collector",
    "Interception",
    "Intervention",
    "KeptPlan",
    "OPERATIONS",
    "RuntimeValue",
    "NO_CAPTURE",
    "OutputRecorder",
    "PaddingWatch",
    "Session",
    "TracePlan",
    "TraceRun",
    "TraceScope",
    "attach_interventions",
    "attach_spec",
    "attached_spec",
    "config_attribute",
    "decorated_paths",
    "decorator_tie_last",
    "edited_modules",
    "head_count",
    "default_index",
    "entry_of",
    "forget_plans",
    "hold_hooks",
    "invalidate",
    "is_under",
    "keep_plan",
    "kept_plan",
    "normalize_output_map",
    "normalized_tasks",
    "own_output_map",
    "plain_config_lookup",
    "plan_hooks",
    "plan_trace",
    "position_counter",
    "release_hooks",
    "requested_flags",
    "resolve_selections",
    "scope_modules",
    "shared_warning",
    "tasks_watch",
    "tie_last_enabled",
    "tie_last_hidden_state",
    "unwrap",
    "warning_state",
]
