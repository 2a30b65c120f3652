"""ModelOutput: the dataclass that capture injects into, with attribute and key access."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields, is_dataclass
from typing import Any

import torch

__all__ = ["ModelOutput", "BaseModelOutput", "BaseModelOutputWithPast"]


class ModelOutput:
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
            if key not in self.keys():
                raise KeyError(key)
            return getattr(self, key)
        return self.to_tuple()[key]

    def __setitem__(self, key: str, value: Any) -> None:
        if key not in self._field_names():
            self.__dict__.setdefault("_extra_keys", []).append(key)
        setattr(self, key, value)

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key) if key in self.keys() else default

    def __contains__(self, key: object) -> bool:
        return key in self.keys()

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())


@dataclass
class BaseModelOutput(ModelOutput):
    """Output of a base model: last hidden state, and hidden states / attentions when captured."""

    last_hidden_state: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


@dataclass
class BaseModelOutputWithPast(ModelOutput):
    """`BaseModelOutput` with the key/value cache of an autoregressive model."""

    last_hidden_state: torch.Tensor | None = None
    past_key_values: Any = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None
