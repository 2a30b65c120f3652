"""The capture engine: a resolved spec's recorders and interventions applied to a model.

Data flows one way here: the walk (`_plan`: which modules a recorder hooks, and the `PlanGuard` of
the structure it read; `_wrappers`: DDP, FSDP, compile and checkpoint wrappers seen through) ->
a block's plan (`_trace_plan`: scopes, names, hooks, layer selections, ties; `_positions`: inputs,
token positions and layers; `_padding`: positions by the attention mask) -> the one cache (`_plans`:
plans kept on the model by content) -> torch's hooks (`_intercept`) -> the record step and its gates
(`_collector`), in sessions (`_session`: what records in this context, flags, the tie-last rule) ->
a block's run (`_trace_run`), the hooks a decorated model holds between capturing forwards
(`_held`), and edits (`_editing`). `_attached` keeps a loaded model's spec. The data types
(`OutputRecorder`, `Intervention`) live below `spec/` (`yamltrace._recorder`, `yamltrace._intervention`);
the names below are what the rest of the package uses.
"""

from ._attached import attach_interventions, attach_spec, attached_spec
from ._collector import Collector, entry_of
from .._intervention import OPERATIONS, Intervention, RuntimeValue
from ._editing import EditRow, edited_modules
from ._editing import head_count
from ._intercept import Interception
from ._held import held_hooks, hold_hooks, release_hooks
from ._padding import PaddingWatch, tasks_watch
from ._padding import shared_warning, warning_state
from ._plan import CAPTURE_MAP_ATTRIBUTE, ModelIndex, invalidate, own_output_map, plan_hooks
from ._plans import KeptPlan, forget_plans, keep_plan, kept_plan
from .._recorder import CAPTURE_DTYPES, CaptureMap, OutputRecorder, default_index, normalize_output_map, normalized_tasks
from ._trace_plan import decorated_paths, is_under, scope_modules
from ._positions import position_counter, resolve_selections
from ._session import (
    NO_CAPTURE,
    Session,
    active_sessions,
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
from ._wrappers import logical_path, unwrap

__all__ = [
    "CAPTURE_DTYPES",
    "CAPTURE_MAP_ATTRIBUTE",
    "CaptureMap",
    "Collector",
    "Interception",
    "Intervention",
    "EditRow",
    "KeptPlan",
    "ModelIndex",
    "OPERATIONS",
    "RuntimeValue",
    "NO_CAPTURE",
    "OutputRecorder",
    "PaddingWatch",
    "Session",
    "TracePlan",
    "TraceRun",
    "TraceScope",
    "active_sessions",
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
    "held_hooks",
    "hold_hooks",
    "invalidate",
    "is_under",
    "keep_plan",
    "kept_plan",
    "logical_path",
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
