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
    "PreTrainedModel": "modeling",
    "capture_outputs": "capture",
    "merge_with_config_defaults": "modeling",
    "trace": "tracing",
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
    from .modeling import PreTrainedModel, merge_with_config_defaults
    from .outputs import BaseModelOutput, BaseModelOutputWithPast, ModelOutput
    from .recorder import OutputRecorder
    from .tracing import Captures, trace
