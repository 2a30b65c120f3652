"""How often and where the padding warning of literal positions (`_padding.PaddingWatch`) is given.

How often: per warning state, a one-item list the watch sets once it warned. `warning_state` gives a
capture its state: the one `shared_warning` opened (an `extract` run: one warning per run), a
decorated model's own (one per model), or a new one (one per `trace` or `intervene` block).

Where: the check runs inside a call of the model, below torch's module call code and yamltrace's
interception, at a depth that differs between a `trace` block, a decorated forward and a model
wrapped in others; `caller_stacklevel` counts those frames, so the warning names the file and line
that called the model.
"""

from __future__ import annotations

import contextlib
import os
import sys
import weakref
from collections.abc import Iterator
from contextvars import ContextVar

import torch.nn.modules.module
from torch import nn

__all__ = ["caller_stacklevel", "shared_warning", "warning_state"]

# A warning state shared by the traces of one `extract` run (`shared_warning`): one warning per run.
_shared: ContextVar[dict[str, list[bool]] | None] = ContextVar("yamltrace_padding_warned", default=None)
# yamltrace's own files and torch's module code (`Module.__call__`, the containers' forwards), as the
# import system named them (as frames name their files: not resolved, so a symlinked install matches).
_INSIDE = (os.path.dirname(os.path.dirname(__file__)) + os.sep, os.path.dirname(torch.nn.modules.module.__file__) + os.sep)


def warning_state(model: nn.Module | None = None, kind: str = "output") -> list[bool]:
    """Whether the padding warning of a `kind` of watch (`PaddingWatch`) was given: the state
    `shared_warning` opened in this context, else `model`'s (one warning per decorated model), else a
    new one (one per `trace` or `intervene` block)."""
    shared = _shared.get()
    if shared is not None:
        return shared.setdefault(kind, [False])
    if model is None:
        return [False]
    state = _BY_MODEL.get(model)
    if state is None:
        state = _BY_MODEL[model] = [False]
    return state


_BY_MODEL: weakref.WeakKeyDictionary[nn.Module, list[bool]] = weakref.WeakKeyDictionary()


@contextlib.contextmanager
def shared_warning() -> Iterator[None]:
    """A context in which every capture shares one padding warning, and all edits another (`extract`:
    one per run)."""
    token = _shared.set({})
    try:
        yield
    finally:
        _shared.reset(token)


def caller_stacklevel() -> int:
    """The `stacklevel` for `warnings.warn` in the function calling this one that points at the first
    frame outside yamltrace and torch's module code: the code that called the model."""
    frame = sys._getframe(1)
    level = 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_INSIDE):
        frame = frame.f_back
        level += 1
    return level
