"""Small Spec builders shared by the tests."""

from __future__ import annotations

from yamltrace.spec import PatchEntry, Spec


def patch_spec(*entries: tuple) -> Spec:
    """A Spec holding only patch entries `(pattern, replacement[, device])`."""
    return Spec(outputs={}, patches=tuple(PatchEntry(e[0], e[1], str(e[1]), *e[2:]) for e in entries))
