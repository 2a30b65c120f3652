"""The transformers-compatible model base: `PreTrainedModel`, `Config`, `ModelOutput`s and
`merge_with_config_defaults`, for models written against yamltrace instead of transformers."""

from ._config import Config
from ._defaults import DEFAULT_CONFIG_ARGUMENTS, merge_with_config_defaults
from ._outputs import BaseModelOutput, BaseModelOutputWithPast, CacheNameError, ModelOutput
from ._pretrained import PreTrainedModel

__all__ = [
    "DEFAULT_CONFIG_ARGUMENTS",
    "BaseModelOutput",
    "BaseModelOutputWithPast",
    "CacheNameError",
    "Config",
    "ModelOutput",
    "PreTrainedModel",
    "merge_with_config_defaults",
]
