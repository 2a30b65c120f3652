"""yamltrace: declarative, YAML-configured capture of submodule outputs for PyTorch models."""

from .capture import capture_outputs
from .config import Config
from .modeling import PreTrainedModel, merge_with_config_defaults
from .outputs import BaseModelOutput, BaseModelOutputWithPast, ModelOutput
from .recorder import OutputRecorder
from .tracing import Captures, trace

__version__ = "0.1.0"

__all__ = [
    "BaseModelOutput",
    "BaseModelOutputWithPast",
    "Captures",
    "Config",
    "ModelOutput",
    "OutputRecorder",
    "PreTrainedModel",
    "capture_outputs",
    "merge_with_config_defaults",
    "trace",
]
