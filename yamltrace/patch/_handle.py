"""What a patch did, and how to undo it: `Replacement` records and the `PatchHandle`."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..engine import invalidate

__all__ = ["Replacement", "PatchHandle"]


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
