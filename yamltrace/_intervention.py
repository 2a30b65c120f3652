"""`Intervention`: one declared edit to module values, the data the spec layer resolves and the engine applies.

An intervention selects what it edits with a recorder's own fields (`select`: target class or class
name, `layer_name`, `index`, `input`, `layers`, `positions`, `seq_dim`), optionally split into heads,
and holds exactly one operation. Plain data: applying it lives with the listeners that apply captures.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from .errors import SpecIssue
from ._recorder import OutputRecorder

__all__ = ["OPERATIONS", "Intervention", "Operation", "RuntimeValue"]

Operation = Literal["zero", "add", "set", "scale", "clamp"]
OPERATIONS: tuple[Operation, ...] = ("zero", "add", "set", "scale", "clamp")


@dataclass(frozen=True)
class RuntimeValue:
    """`{value: NAME}`: a tensor (or one tensor per selected module) supplied when the edit runs."""

    name: str


@dataclass(frozen=True, eq=False)
class Intervention:
    """One edit: `operation` on the values `select` picks, in declaration order among a spec's edits.

    `value` depends on the operation: `None` for `zero`; for `add` / `set` a float, a tuple of floats
    (a vector along the last dimension), a `torch.Tensor` (read from the spec's folder) or a
    `RuntimeValue`; a float for `scale`; `(low, high)` for `clamp`, either `None`. `heads` keeps the
    edit to these heads of the last dimension, split in `head_dim`-sized heads (`None`: by the head
    count of the nearest module from the edited one up, `engine._editing.head_count`). `where` locates it in its spec for errors; `reference` is the
    `FILE.safetensors:NAME` a tensor value was read from (what `Spec.to_yaml` writes back). Equality and
    hashing ignore both; tensor values are equal when their dtype, shape and elements are (`torch.equal`).
    """

    name: str
    select: OutputRecorder
    operation: Operation
    value: Any = None
    heads: tuple[int, ...] | None = None
    head_dim: int | None = None
    where: SpecIssue | None = field(default=None, compare=False, repr=False)
    reference: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.operation not in OPERATIONS:
            raise ValueError(
                f"Intervention {self.name!r}: unknown operation {self.operation!r}; use one of {', '.join(OPERATIONS)}."
            )
        if self.heads is not None:
            object.__setattr__(self, "heads", tuple(self.heads))

    def _key(self) -> tuple[Any, ...]:
        """The compared fields, a tensor value standing in by its dtype and shape (hashable, cheap)."""
        value = self.value
        if isinstance(value, torch.Tensor):
            value = ("tensor", value.dtype, tuple(value.shape))
        return (self.name, self.select, self.operation, value, self.heads, self.head_dim)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Intervention):
            return NotImplemented
        if self._key() != other._key():
            return False
        mine, theirs = self.value, other.value
        return not isinstance(mine, torch.Tensor) or torch.equal(mine.detach().cpu(), theirs.detach().cpu())

    def __hash__(self) -> int:
        return hash(self._key())
