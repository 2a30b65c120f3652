"""What a patch did, and how to undo it: `Replacement` records and the `PatchHandle`."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import nn

from ..engine import invalidate

__all__ = ["Replacement", "PatchHandle", "model_device", "device_type", "device_matches"]


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
    """The device ("cpu", "cuda:0", "mps:0", ...) of the model's first parameter or buffer; "cpu" if none."""
    for tensor in itertools.chain(model.parameters(), model.buffers()):
        return str(tensor.device)
    return "cpu"


def device_type(device: str | torch.device | None, default: str) -> str:
    """`device` as torch writes it ("cpu", "cuda", "cuda:1", ...), or `default` when it is None.

    A spec's patch `device` is matched against it with `device_matches`."""
    return default if device is None else str(torch.device(device))


def device_matches(wanted: str, device: str) -> bool:
    """Whether a patch entry's `device` condition holds on `device`: a type (`cuda`) matches every device
    of that type; a device with an index (`cuda:1`) matches that device only (`cuda` alone is the current one)."""
    w, d = torch.device(wanted), torch.device(device)
    if w.type != d.type:
        return False
    if w.index is None:
        return True
    index = d.index
    if index is None:
        index = torch.cuda.current_device() if d.type == "cuda" and torch.cuda.is_available() else 0
    return w.index == index
