"""Where an intervention's `layers` (module order) and a capture's (call order) would differ: a
module it edits that runs more than once in one root call.

An intervention edits modules: its `layers` keep positions among the modules its selector matches,
in module order (`_editing.edited_modules`), and the edit applies to every call of each. A capture's
`layers` keep positions among the values recorded in a call, in call order. In a model whose layers
each run once per forward, in order, the two agree; a module shared between layers (ALBERT's layer,
a looped block) runs several times, and `layers` cannot pick one of its calls. A `CallCheck` counts
the calls of the edited modules of such interventions in each root call (published by the padding
watch's hooks, `_padding.root_call`) and warns, once per block or handle, located at the intervention
(the message) and at the model code that calls the module the second time (the warning's line).
A module seen to run exactly once in a root call is not checked again (nothing is paid for it in
later blocks).
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Sequence
from typing import Any

from torch import nn
from torch.compiler import is_dynamo_compiling

from ..errors import SpecError
from ._editing import EditRow, edit_issue
from ._intercept import Enter, Exit, Interception
from ._padding import RootCall, root_call
from ._padding_warning import caller_stacklevel

__all__ = ["CallCheck"]

# The edited modules seen to run exactly once in a root call.
_ONCE: weakref.WeakSet[nn.Module] = weakref.WeakSet()


class CallCheck:
    """The check of the `rows` whose intervention has `layers` and whose module is not known to run
    once per root call: `install()` puts its frames on them, `finished(call)` takes a root call's counts."""

    def __init__(self, rows: Sequence[EditRow]) -> None:
        self.rows = rows
        self.warned = [False]

    @classmethod
    def of(cls, rows: Sequence[EditRow]) -> CallCheck | None:
        """The check of `rows`, None when none needs one."""
        kept = [row for row in rows if row.edit.iv.select.layers is not None and row.module not in _ONCE]
        return cls(kept) if kept else None

    def install(self, into: Interception) -> None:
        """Put the counting frames on the checked modules, owned by `into`."""
        into.add(frames=[(row.module, *_frame(row, self.warned)) for row in self.rows])

    def finished(self, call: RootCall) -> None:
        """A root call ended: the modules that ran once in it need no check again."""
        for row in self.rows:
            if call.calls.get(id(row.edit)) == 1:
                _ONCE.add(row.module)


def _frame(row: EditRow, warned: list[bool]) -> tuple[Enter, Exit]:
    key = id(row.edit)  # per intervention and module: two edits of one module count apart

    def enter(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        call = None if is_dynamo_compiling() else root_call.get()
        if call is None:
            return
        count = call.calls[key] = call.calls.get(key, 0) + 1
        if count == 2 and not warned[0]:
            warned[0] = True
            warnings.warn(_message(row), stacklevel=caller_stacklevel())  # (at the model code calling the module)

    def exit(token: None, output: Any, finished: bool) -> None:
        return None

    return enter, exit


def _message(row: EditRow) -> str:
    iv = row.edit.iv
    message = (
        f"intervention {iv.name!r} (layers {list(iv.select.layers or ())}) edits module {row.path.lstrip('.') or '<root>'}, "
        "which runs more than once in one forward: the edit applies to each of its calls. An intervention's layers "
        "count the modules its selector matches, in module order, not their calls as a capture's layers do, so they "
        "cannot pick one of its calls; to edit one call only, select a module that runs once per call. "
        "(Warned once per block or handle.)"
    )
    return "yamltrace: " + str(SpecError([edit_issue(iv, message)]))
