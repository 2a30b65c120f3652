"""yamltrace: declarative, YAML-configured capture of submodule outputs for PyTorch models.

The data flows one way, and the subpackages follow it: YAML text -> validated document -> resolved
`Spec` (`yamltrace.spec`) -> hooks that record (`yamltrace.engine`, used by `capture_outputs` and
`trace`) and class swaps (`yamltrace.patch`) -> checkpoints that carry their spec
(`yamltrace.checkpoint`). `yamltrace.modeling` holds the transformers-compatible model base.

Public names load on first use, so `yamltrace.validate_spec` (and the command line's `validate`)
never imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports

__version__ = "0.1.0"

# public name -> the module that defines it
_EXPORTS = {
    # capture
    "Captures": ".tracing",
    "OutputRecorder": ".engine",
    "capture_outputs": ".capture",
    "apply_interventions": ".intervening",
    "intervene": ".intervening",
    "release_hooks": ".engine",
    "trace": ".tracing",
    # specs
    "PatchEntry": ".spec",
    "Spec": ".spec",
    "load_spec": ".spec",
    "register_class": ".spec",
    "spec_from_model": ".spec",
    "unregister_class": ".spec",
    "validate_spec": ".spec",
    # patching (the scoped API first; the process-wide registry is kept for transformers parity)
    "PatchHandle": ".patch",
    "apply_patches": ".patch",
    "patch_model": ".patch",
    "patch_output_recorders": ".patch",
    "clear_patch_mapping": ".patch",
    "get_patch_mapping": ".patch",
    "register_patch_mapping": ".patch",
    "unregister_patch_mapping": ".patch",
    # checkpoints
    "from_pretrained": ".checkpoint",
    "save_pretrained": ".checkpoint",
    # extraction at scale
    "extract": ".extraction",
    "open_activations": ".extraction",
    # the transformers-compatible model base (also in yamltrace.modeling)
    "ModelOutput": ".modeling",
    "PreTrainedModel": ".modeling",
    "merge_with_config_defaults": ".modeling",
    # errors
    "CaptureError": ".errors",
    "NeverRanWarning": ".errors",
    "PatchError": ".errors",
    "PatchProblem": ".errors",
    "SpecError": ".errors",
    "SpecIssue": ".errors",
    "YamltraceError": ".errors",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)

if TYPE_CHECKING:
    from .capture import capture_outputs
    from .checkpoint import from_pretrained, save_pretrained
    from .engine import OutputRecorder, release_hooks
    from .extraction import extract, open_activations
    from .intervening import apply_interventions, intervene
    from .errors import CaptureError, NeverRanWarning, PatchError, PatchProblem, SpecError, SpecIssue, YamltraceError
    from .modeling import ModelOutput, PreTrainedModel, merge_with_config_defaults
    from .patch import (
        PatchHandle,
        apply_patches,
        clear_patch_mapping,
        get_patch_mapping,
        patch_model,
        patch_output_recorders,
        register_patch_mapping,
        unregister_patch_mapping,
    )
    from .spec import PatchEntry, Spec, load_spec, register_class, spec_from_model, unregister_class, validate_spec
    from .tracing import Captures, trace
