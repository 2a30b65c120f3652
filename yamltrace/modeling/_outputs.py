"""ModelOutput: the dataclass that capture injects into, with attribute and key access.

The cache field is named as the transformers release yamltrace follows names it
(`yamltrace._versions.cache_named_cache`): from 5.24.0 it is `cache`, and `past_key_values` /
`cache_params` are deprecated aliases of it as constructor keywords, keys (item access and
assignment, `in`, `get`) and attributes, each use warning with a `FutureWarning`; before 5.24.0 the
field is `past_key_values` and the other names are plain unknown names. From 5.25.0
(`yamltrace._versions.declared_cache_fields_kept`), a subclass that still declares `past_key_values` or
`cache_params` as a field keeps them: its `__init__` renames no keyword, and a name it declares is a
key and attribute of its own (an alias it does not declare is still renamed to `cache`).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields, is_dataclass
from typing import Any, TypeVar

import torch

from .._versions import cache_named_cache, declared_cache_fields_kept
from ..errors import CacheNameError

__all__ = ["ModelOutput", "BaseModelOutput", "BaseModelOutputWithPast", "CacheNameError"]

_ALIASES = ("past_key_values", "cache_params")  # the deprecated names of `cache` (transformers 5.24.0 on)
_DEPRECATED = "`past_key_values`/`cache_params` are deprecated. Use `cache` instead."  # transformers' words

C = TypeVar("C", bound=type)


def _warn_deprecated(stacklevel: int) -> None:
    """The deprecation warning for an alias of `cache`; silent while `torch.compile` traces, as transformers is."""
    if not torch.compiler.is_compiling():
        warnings.warn(_DEPRECATED, FutureWarning, stacklevel=stacklevel + 1)


def _renamed(cls: type, key: Any) -> bool:
    """Whether `key` of an output of class `cls` is a deprecated alias of `cache`: an alias the followed
    release renames, unless (5.25.0 on) `cls` declares it as a field."""
    if key not in _ALIASES or not cache_named_cache():
        return False
    return not (key in getattr(cls, "__dataclass_fields__", {}) and declared_cache_fields_kept())


def _current_name(cls: type, key: Any, stacklevel: int = 3) -> Any:
    """`cache` for a deprecated alias of it (`_renamed`), with a warning; else `key`."""
    if _renamed(cls, key):
        _warn_deprecated(stacklevel)
        return "cache"
    return key


def _rename_alias_keywords(kwargs: dict[str, Any]) -> None:
    """Move a deprecated cache keyword to `cache` in place; both given is a `CacheNameError` (transformers 5.24.0's rule)."""
    for alias in _ALIASES:
        if alias in kwargs:
            if "cache" in kwargs:
                raise CacheNameError(
                    f"An output was given both `cache` and `{alias}`, two names of one field: pass `cache` only."
                )
            kwargs["cache"] = kwargs.pop(alias)
            _warn_deprecated(3)
            return  # like transformers, one alias is renamed; a second one stays an unknown keyword


def _renaming(cls: type, init: Callable[..., None]) -> Callable[..., None]:
    declares_alias = any(alias in getattr(cls, "__dataclass_fields__", {}) for alias in _ALIASES)

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if (
            ("past_key_values" in kwargs or "cache_params" in kwargs)
            and cache_named_cache()
            and not (declares_alias and declared_cache_fields_kept())
        ):
            _rename_alias_keywords(kwargs)
        init(self, *args, **kwargs)

    return __init__


class _CacheAliasesMeta(type):
    """Wraps the `__init__` that `@dataclass` sets on a `ModelOutput` subclass so it renames a deprecated cache keyword.

    `@dataclass` sets `__init__` with `setattr` after the class is made (and after its fields), so the
    wrapping happens there (a plain function, which `torch.compile` inlines), as transformers 5.24.0 does.
    From 5.25.0 a class that declares an alias as a field renames nothing (`_renaming` asks at the call).
    """

    def __setattr__(cls, name: str, value: Any) -> None:
        if name == "__init__" and callable(value):
            value = _renaming(cls, value)
        super().__setattr__(name, value)


class ModelOutput(metaclass=_CacheAliasesMeta):
    """Base of model outputs: a dataclass readable as attributes, as a mapping, or as a tuple.

    Keys are the fields that are not `None`, in declaration order, followed by keys added with item
    assignment (which capture uses for keys a subclass does not declare). `to_tuple()` drops `None`.
    """

    def _field_names(self) -> list[str]:
        names: list[str] = [f.name for f in fields(self)] if is_dataclass(self) else []
        return names + [k for k in self.__dict__.get("_extra_keys", ()) if k not in names]

    def keys(self) -> list[str]:
        return [name for name in self._field_names() if getattr(self, name, None) is not None]

    def values(self) -> list[Any]:
        return [getattr(self, k) for k in self.keys()]

    def items(self) -> list[tuple[str, Any]]:
        return [(k, getattr(self, k)) for k in self.keys()]

    def to_tuple(self) -> tuple[Any, ...]:
        return tuple(self.values())

    def __getitem__(self, key: str | int | slice) -> Any:
        if isinstance(key, str):
            key = _current_name(type(self), key)
            if key not in self.keys():
                raise KeyError(key)
            return getattr(self, key)
        return self.to_tuple()[key]

    def __setitem__(self, key: str, value: Any) -> None:
        key = _current_name(type(self), key)
        if key not in self._field_names():
            self.__dict__.setdefault("_extra_keys", []).append(key)
        setattr(self, key, value)

    def get(self, key: str, default: Any = None) -> Any:
        key = _current_name(type(self), key)
        return getattr(self, key) if key in self.keys() else default

    def __contains__(self, key: object) -> bool:
        return _current_name(type(self), key) in self.keys()

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())

    def __setattr__(self, name: str, value: Any) -> None:
        # A field a subclass still declares under an alias's name shadows the alias property; where the
        # followed release renames it (5.24.0), the value goes to `cache`, as an attribute, not a key.
        if name in _ALIASES and name in getattr(type(self), "__dataclass_fields__", {}) and _renamed(type(self), name):
            name = "cache"
        super().__setattr__(name, value)

    # The aliases as attributes. A subclass field of the same name (before 5.24.0) shadows them.
    @property
    def past_key_values(self) -> Any:
        """The cache (a deprecated alias of `cache` from transformers 5.24.0 on; before, a field of its own)."""
        return self._alias("past_key_values")

    @past_key_values.setter
    def past_key_values(self, value: Any) -> None:
        self._set_alias("past_key_values", value)

    @property
    def cache_params(self) -> Any:
        """The cache (a deprecated alias of `cache` from transformers 5.24.0 on)."""
        return self._alias("cache_params")

    @cache_params.setter
    def cache_params(self, value: Any) -> None:
        self._set_alias("cache_params", value)

    def _alias(self, name: str) -> Any:
        if _renamed(type(self), name):
            _warn_deprecated(3)
            return getattr(self, "cache")
        if name in self.__dict__:  # a plain attribute (before 5.24.0), or a declared field without a default (5.25.0 on)
            return self.__dict__[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _set_alias(self, name: str, value: Any) -> None:
        if _renamed(type(self), name):
            _warn_deprecated(3)
            self.cache = value
        else:
            self.__dict__[name] = value


def _cache_field(cls: C) -> C:
    """Before transformers 5.24.0, rename the class's `cache` field to `past_key_values` (apply under `@dataclass`)."""
    if not cache_named_cache():
        annotations = vars(cls)["__annotations__"]
        cls.__annotations__ = {("past_key_values" if name == "cache" else name): kind for name, kind in annotations.items()}
        type.__setattr__(cls, "past_key_values", vars(cls)["cache"])
        type.__delattr__(cls, "cache")
    return cls


@dataclass
class BaseModelOutput(ModelOutput):
    """Output of a base model: last hidden state, and hidden states / attentions when captured."""

    last_hidden_state: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


@dataclass
@_cache_field
class BaseModelOutputWithPast(ModelOutput):
    """`BaseModelOutput` with the key/value cache of an autoregressive model, in `cache` (transformers
    5.24.0 on; `past_key_values` and `cache_params` are its deprecated aliases) or, before 5.24.0, in
    `past_key_values`."""

    last_hidden_state: torch.Tensor | None = None
    cache: Any = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None
