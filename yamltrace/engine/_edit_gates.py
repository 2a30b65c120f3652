"""Edits put on the modules' torch hooks (`install_edits`), each behind its gate (`_gated`): applied
to the calls a block session records (`block_open`, the listeners' gate), and for add or scale of a whole tensor by a number or a vector, by the torch op
itself where the value applies as it is (`Edit.direct`); anything else takes `Edit.tensor`, the
general path, which stays the home of the rules (tests/unit/test_edit_paths.py runs each copy
against the rule and the general path).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, cast

import torch
from ._collector import block_open, session_records
from ._intercept import INPUTS, OUTPUTS, Interception
from ._editing import Edit, EditRow

__all__ = ["install_edits"]


def install_edits(rows: Sequence[EditRow], session: Any, into: Interception) -> list[bool]:
    """Put each row's edit on its module, in order, owned by `into`: applied to calls `session` records
    (a block session, `session_records`), or to every call with `session` None. Returns, per row,
    whether its edit has applied since (kept for a block session only: what its end reports)."""
    ran = [False] * len(rows)
    into.add(
        edits=[
            (module, OUTPUTS if edit.source is None else INPUTS, _gated(edit, session, ran, i))
            for i, (module, _, edit) in enumerate(rows)
        ]
    )
    return ran


def _gated(edit: Edit, session: Any, ran: list[bool], row: int) -> Callable[..., Any]:
    """The edit, for calls `session` records (every call with `session` None); other calls pass through,
    and one it applies to sets `ran[row]` (with a session). An output edit asks `block_open` and calls
    the torch op itself where `Edit.direct` allows, else `Edit.tensor` (tests/unit/test_edit_paths.py
    runs these copies against both)."""
    if edit.source is not None:
        if session is None:
            return edit.inputs

        def inputs(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
            if not session_records(session):
                return args, kwargs
            ran[row] = True
            return edit.inputs(args, kwargs)

        return inputs
    whole, tensor, is_tensor = edit.output, edit.tensor, torch.Tensor
    op, size = edit.direct()
    if op is None or size is None:
        tensor = tensor if op is None else partial(cast(Any, op), other=edit.value)  # (a number: nothing to check)

        def output(output: Any) -> Any:
            if session is not None:
                if not block_open(session):
                    return output
                ran[row] = True
            return tensor(output) if type(output) is is_tensor else whole(output)

        return output

    def vector(output: Any) -> Any:
        if session is not None:
            if not block_open(session):
                return output
            ran[row] = True
        if type(output) is not is_tensor:
            return whole(output)
        value = edit.value  # (read per call: `Edit.tensor` may keep it converted)
        try:
            if value.dtype is output.dtype and output.shape[-1] == size:
                return op(output, value)
        except (RuntimeError, IndexError):
            pass  # (on another device, or no last dimension: the general path moves it, or tells)
        return tensor(output)

    return vector
