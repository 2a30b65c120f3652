"""Config: a small model configuration with the fields capture reads, and a JSON round trip."""

from __future__ import annotations

import json
import os
from typing import Any, TypeVar

__all__ = ["Config"]

_C = TypeVar("_C", bound="Config")  # the subclass a classmethod is called on


class Config:
    """Model configuration: known capture fields with defaults, plus any extra keyword as an attribute.

    Capture reads `output_<key>` flags, `return_dict`, `use_cache`, `num_hidden_layers` and
    `tie_last_hidden_states` (`None` leaves the decision to the forward's decorator).
    """

    model_type: str = "yamltrace"

    def __init__(
        self,
        *,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        return_dict: bool = True,
        use_cache: bool = True,
        num_hidden_layers: int | None = None,
        tie_last_hidden_states: bool | None = None,
        **kwargs: Any,
    ) -> None:
        self.output_attentions = output_attentions
        self.output_hidden_states = output_hidden_states
        self.return_dict = return_dict
        self.use_cache = use_cache
        self.num_hidden_layers = num_hidden_layers
        self.tie_last_hidden_states = tie_last_hidden_states
        for name, value in kwargs.items():
            setattr(self, name, value)

    def to_dict(self) -> dict[str, Any]:
        """The config as a JSON-compatible dict, with `model_type` recorded."""
        return {"model_type": self.model_type, **self.__dict__}

    @classmethod
    def from_dict(cls: type[_C], data: dict[str, Any]) -> _C:
        data = dict(data)
        model_type = data.pop("model_type", cls.model_type)
        if model_type != cls.model_type:
            raise ValueError(f"{cls.__name__} reads model_type {cls.model_type!r}, got {model_type!r}.")
        return cls(**data)

    def to_json_string(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json_string(cls: type[_C], text: str) -> _C:
        return cls.from_dict(json.loads(text))

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the config as JSON to `path`."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.to_json_string())

    @classmethod
    def load(cls: type[_C], path: str | os.PathLike[str]) -> _C:
        """Read a config written by `save`."""
        with open(path, encoding="utf-8") as f:
            return cls.from_json_string(f.read())

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items())
        return f"{type(self).__name__}({fields})"
