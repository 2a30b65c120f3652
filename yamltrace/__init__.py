"""yamltrace: declarative, YAML-configured capture of submodule outputs for PyTorch models.

Public names load on first use, so `yamltrace.validate_spec` (and the command line's `validate`)
never imports torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> the private module that defines it
_EXPORTS = {
    "BaseModelOutput": "outputs",
    "BaseModelOutputWithPast": "outputs",
    "Captures": "tracing",
    "Config": "config",
    "ModelOutput": "outputs",
    "OutputRecorder": "recorder",
    "PatchEntry": "spec",
    "PatchHandle": "patching",
    "PreTrainedModel": "modeling",
    "Spec": "spec",
    "SpecError": "errors",
    "SpecIssue": "errors",
    "apply_patches": "patching",
    "capture_outputs": "capture",
    "clear_patch_mapping": "patch_registry",
    "from_pretrained": "pretrained",
    "get_patch_mapping": "patch_registry",
    "load_spec": "spec",
    "merge_with_config_defaults": "modeling",
    "patch_model": "patching",
    "patch_output_recorders": "patching",
    "register_class": "registry",
    "register_patch_mapping": "patch_registry",
    "save_pretrained": "pretrained",
    "spec_from_model": "spec",
    "trace": "tracing",
    "unregister_patch_mapping": "patch_registry",
    "validate_spec": "schema",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'yamltrace' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:
    from .capture import capture_outputs
    from .config import Config
    from .errors import SpecError, SpecIssue
    from .modeling import PreTrainedModel, merge_with_config_defaults
    from .outputs import BaseModelOutput, BaseModelOutputWithPast, ModelOutput
    from .patch_registry import clear_patch_mapping, get_patch_mapping, register_patch_mapping, unregister_patch_mapping
    from .patching import PatchHandle, apply_patches, patch_model, patch_output_recorders
    from .pretrained import from_pretrained, save_pretrained
    from .recorder import OutputRecorder
    from .registry import register_class
    from .schema import validate_spec
    from .spec import PatchEntry, Spec, load_spec, spec_from_model
    from .tracing import Captures, trace
