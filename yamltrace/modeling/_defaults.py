"""`merge_with_config_defaults`: forward arguments the caller left out are read from `self.config`."""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

import torch
from torch import nn

from .._versions import use_cache_off_needs_grad
from ..engine import plain_config_lookup

__all__ = ["merge_with_config_defaults", "DEFAULT_CONFIG_ARGUMENTS"]

F = TypeVar("F", bound=Callable[..., Any])

# The arguments transformers 5.x resolves from the config when the caller does not pass them.
DEFAULT_CONFIG_ARGUMENTS = ("use_cache", "vision_feature_layer", "vision_feature_select_strategy", "vision_aspect_ratio")
_SELECT_STRATEGIES = ("default", "full")


def merge_with_config_defaults(func: F | None = None, *, names: Sequence[str] = DEFAULT_CONFIG_ARGUMENTS) -> Any:
    """Fill arguments the caller left out (or passed as `None`) from `self.config`.

    An explicit positional or keyword value wins, else the config's value. `use_cache=True` while
    training with gradient checkpointing becomes False with a warning (from transformers 5.24.0 on,
    only while gradients are enabled: without them nothing is checkpointed). `is_causal` from kwargs
    or the config is set on both for the duration of the call.

    Args:
        func: the `forward` to decorate (used bare, `@merge_with_config_defaults`, or called with `names`).
        names: the arguments to fill from the config when the caller left them out.
    """

    def decorate(forward: F) -> F:
        parameters = list(inspect.signature(forward).parameters)[1:]  # drop self
        positions = {name: parameters.index(name) for name in names if name in parameters}

        @functools.wraps(forward)
        def wrapper(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
            config: Any = self.config
            absent = _plainly_absent(type(config))
            own: dict[str, Any] = (
                config.__dict__ if absent else {}
            )  # read once: a Python __getattribute__ on transformers' configs
            for name in names:
                position = positions.get(name, len(args))  # len(args): not passed positionally
                positional = position < len(args)
                if positional and args[position] is not None:
                    value = args[position]
                elif kwargs.get(name) is not None:
                    value = kwargs[name]
                elif name in absent:
                    value = own.get(name)
                else:
                    value = getattr(config, name, None)
                if value is None:
                    continue
                value = _checked_default(self, name, value)
                if positional:
                    args = args[:position] + (value,) + args[position + 1 :]
                else:
                    kwargs[name] = value
            if "is_causal" in kwargs:
                is_causal = kwargs["is_causal"]
            elif "is_causal" in absent:
                is_causal = own.get("is_causal")
            else:
                is_causal = getattr(config, "is_causal", None)
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

        return cast(F, wrapper)  # functools.wraps keeps the signature of `forward`

    if func is not None:
        return decorate(func)
    return decorate


# Per config class: the names whose lookup on an instance is exactly a read of the instance `__dict__`.
_ABSENT: dict[type, frozenset[str]] = {}


def _plainly_absent(cls: type) -> frozenset[str]:
    """The names of `DEFAULT_CONFIG_ARGUMENTS` and `is_causal` that no class of `cls`'s MRO defines,
    on a class without `__getattr__` whose `__getattribute__` is `object`'s or transformers'
    `PretrainedConfig`'s (which renames through `attribute_map`, then does `object`'s lookup).

    For those, `getattr(config, name, None)` equals `config.__dict__.get(name)`, without raising and
    catching the `AttributeError` of a missing attribute through a Python `__getattribute__` (costly on
    transformers' configs, which lack the vision names; docs/performance.md).
    """
    absent = _ABSENT.get(cls)
    if absent is None:
        plain = plain_config_lookup(cls) is not None
        renamed = getattr(cls, "attribute_map", None) or {}
        absent = frozenset(
            name
            for name in (*DEFAULT_CONFIG_ARGUMENTS, "is_causal")
            if plain and cls.__dictoffset__ != 0 and name not in renamed and not any(name in vars(base) for base in cls.__mro__)
        )
        _ABSENT[cls] = absent
    return absent


def _checkpointing(model: nn.Module) -> bool:
    """Whether `model`'s forward runs checkpointed layers now, by the rule of the transformers release followed."""
    if not (model.training and getattr(model, "gradient_checkpointing", False)):
        return False
    return torch.is_grad_enabled() or not use_cache_off_needs_grad()


def _checked_default(model: nn.Module, name: str, value: Any) -> Any:
    if name == "use_cache" and value and _checkpointing(model):
        warnings.warn("`use_cache=True` is incompatible with gradient checkpointing. Setting `use_cache=False`.", stacklevel=3)
        return False
    if name == "vision_feature_select_strategy" and value not in _SELECT_STRATEGIES:
        raise ValueError(f"Unexpected vision_feature_select_strategy {value!r}; choose one of {list(_SELECT_STRATEGIES)}.")
    return value
