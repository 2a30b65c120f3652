"""What a patch did, and how to undo it: `Replacement` records and the `PatchHandle`."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import nn

from ..engine import invalidate

__all__ = ["Replacement", "PatchHandle", "model_device", "device_type"]


@dataclass(frozen=True)
class Replacement:
    """One change a patch made: where, from what, to what, and how.

    `how` is "attribute" (a module attribute rebound by `apply_patches`), "from_module" or "class"
    (a submodule swapped by `patch_model`), or "recorder" (a capture-map entry retargeted).
    """

    path: str
    original: type | str
    replacement: type
    how: str


class PatchHandle:
    """Undoes a patch: `remove()` restores what was replaced (idempotent); also a context manager."""

    def __init__(self, replaced: Iterable[Replacement], undo: Iterable[Callable[[], None]]) -> None:
        self.replaced = tuple(replaced)
        self._undo = list(undo)
        self._lock = threading.Lock()

    def remove(self) -> None:
        """Restore the originals, last change first. Calling it again does nothing."""
        with self._lock:
            undo, self._undo = self._undo, []
        for step in reversed(undo):
            step()
        invalidate()

    def __enter__(self) -> PatchHandle:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        return f"PatchHandle({len(self.replaced)} replaced, {'active' if self._undo else 'removed'})"


def model_device(model: nn.Module) -> str:
    """The device type ("cpu", "cuda", "mps", ...) of the model's first parameter or buffer; "cpu" if none."""
    for tensor in itertools.chain(model.parameters(), model.buffers()):
        return tensor.device.type
    return "cpu"


def device_type(device: str | torch.device | None, default: str) -> str:
    """The device type of `device` ("cpu", "cuda", ...), or `default` when it is None."""
    return default if device is None else torch.device(device).type
