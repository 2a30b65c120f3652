"""PreTrainedModel and `merge_with_config_defaults`: the minimal model base that capture builds on."""

from __future__ import annotations

import functools
import inspect
import os
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import torch
from torch import nn

from .config import Config
from .recorder import CaptureMap, normalize_output_map

__all__ = ["PreTrainedModel", "merge_with_config_defaults", "DEFAULT_CONFIG_ARGUMENTS"]

F = TypeVar("F", bound=Callable[..., Any])

# The arguments transformers 5.x resolves from the config when the caller does not pass them.
DEFAULT_CONFIG_ARGUMENTS = ("use_cache", "vision_feature_layer", "vision_feature_select_strategy", "vision_aspect_ratio")
_SELECT_STRATEGIES = ("default", "full")


class PreTrainedModel(nn.Module):
    """Base class of yamltrace models: a `config` and a class-level capture map.

    Subclasses declare `_can_record_outputs` (output key -> recorder or list of recorders), decorate the
    base model's `forward` with `merge_with_config_defaults` and `capture_outputs`, and call
    `post_init()` at the end of `__init__`.
    """

    config_class: ClassVar[type[Config]] = Config
    _can_record_outputs: ClassVar[CaptureMap | None] = None

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.config = config
        self.gradient_checkpointing = False

    def post_init(self) -> None:
        """Check the class's capture map once the model is built, so a bad map fails at construction."""
        normalize_output_map(self._can_record_outputs)

    def save_pretrained(self, directory: str | os.PathLike[str], *, spec: Any = None) -> Path:
        """Write `config.json`, the weights and `yamltrace.yaml` (`spec`, else the attached one, else the class map)."""
        from .pretrained import save_yamltrace_model

        return save_yamltrace_model(self, directory, spec=spec)

    @classmethod
    def from_pretrained(
        cls,
        directory: str | os.PathLike[str],
        *,
        spec: Any = None,
        overrides: Any = None,
        trust_imports: bool = False,
        device: str | torch.device | None = None,
        dtype: torch.dtype | None = None,
    ) -> PreTrainedModel:
        """Load a checkpoint with its spec: `spec=` replaces the shipped `yamltrace.yaml`, `overrides=`
        overlays it key by key. The spec is resolved before any weight is read; its patches apply while
        the model is built; the loaded model captures what the spec declares (`model.yamltrace_spec`)."""
        from .pretrained import load_yamltrace_model

        return load_yamltrace_model(
            cls, directory, spec=spec, overrides=overrides, trust_imports=trust_imports, device=device, dtype=dtype
        )


def merge_with_config_defaults(func: F | None = None, *, names: Sequence[str] = DEFAULT_CONFIG_ARGUMENTS) -> Any:
    """Fill arguments the caller left out (or passed as `None`) from `self.config`.

    An explicit positional or keyword value wins, else the config's value. `use_cache=True` while
    training with gradient checkpointing becomes False with a warning. `is_causal` from kwargs or the
    config is set on both for the duration of the call.
    """

    def decorate(forward: F) -> F:
        parameters = list(inspect.signature(forward).parameters)[1:]  # drop self
        positions = {name: parameters.index(name) for name in names if name in parameters}

        @functools.wraps(forward)
        def wrapper(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
            config = self.config
            for name in names:
                position = positions.get(name)
                positional = position is not None and len(args) > position
                if positional and args[position] is not None:
                    value = args[position]
                elif kwargs.get(name) is not None:
                    value = kwargs[name]
                else:
                    value = getattr(config, name, None)
                if value is None:
                    continue
                value = _checked_default(self, name, value)
                if positional:
                    args = args[:position] + (value,) + args[position + 1 :]
                else:
                    kwargs[name] = value
            is_causal = kwargs.get("is_causal", getattr(config, "is_causal", None))
            if is_causal is None:
                return forward(self, *args, **kwargs)
            had_is_causal = hasattr(config, "is_causal")
            previous = getattr(config, "is_causal", None)
            config.is_causal = is_causal
            kwargs["is_causal"] = is_causal
            try:
                return forward(self, *args, **kwargs)
            finally:
                if had_is_causal:
                    config.is_causal = previous
                else:
                    del config.is_causal

        return wrapper  # type: ignore[return-value]

    if func is not None:
        return decorate(func)
    return decorate


def _checked_default(model: nn.Module, name: str, value: Any) -> Any:
    if name == "use_cache" and value and model.training and getattr(model, "gradient_checkpointing", False):
        warnings.warn("`use_cache=True` is incompatible with gradient checkpointing. Setting `use_cache=False`.", stacklevel=3)
        return False
    if name == "vision_feature_select_strategy" and value not in _SELECT_STRATEGIES:
        raise ValueError(f"Unexpected vision_feature_select_strategy {value!r}; choose one of {list(_SELECT_STRATEGIES)}.")
    return value
