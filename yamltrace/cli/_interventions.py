"""What a spec's interventions do, in words: `describe` (one line per edit, for `inspect` and `check`)
and `report_interventions` (the modules each one hooks on a built model, for `check`)."""

from __future__ import annotations

from typing import Any, TextIO

from ._report import escape_text

__all__ = ["describe", "report_interventions"]


def _value(value: Any, reference: str | None) -> str:
    """An operation's value as a spec writes it, kept short (a tensor: its file reference and shape)."""
    from ..engine import RuntimeValue  # `check` has imported torch by now; `inspect` never comes here

    if reference is not None:
        shape = getattr(value, "shape", None)
        return f"{{tensor: {reference}}}" + ("" if shape is None else f" {list(shape)}")
    if isinstance(value, RuntimeValue):
        return f"{{value: {value.name}}}"
    if isinstance(value, tuple) and len(value) > 4:
        return f"a vector of {len(value)} numbers"
    if isinstance(value, tuple):
        return "[" + ", ".join("null" if v is None else f"{v:g}" for v in value) + "]"
    return f"{value:g}" if isinstance(value, float) else repr(value)


def describe(edit: Any) -> str:
    """`NAME (line N): OPERATION [VALUE] on MODULES [selection]` for one `Intervention`."""
    select = edit.select
    where = edit.where
    line = f" (line {where.line})" if where is not None and where.line else ""
    value = "" if edit.operation == "zero" else " " + _value(edit.value, edit.reference)
    modules = " | ".join(t.__name__ for t in select.target_classes) or repr(select.class_name)
    parts = [
        f"layer_name {select.layer_name!r}" if select.layer_name else "",
        f"input {select.input!r}" if select.input is not None else f"output[{select.index}]" if select.index else "",
        f"layers {list(select.layers)}" if select.layers is not None else "",
        f"positions {select.positions if isinstance(select.positions, str) else list(select.positions)}"
        if select.positions is not None
        else "",
        f"heads {list(edit.heads)}" if edit.heads is not None else "",
    ]
    selection = ", ".join(p for p in parts if p)
    return escape_text(f"{edit.name}{line}: {edit.operation}{value} on {modules}" + (f" ({selection})" if selection else ""))


def report_interventions(spec: Any, model: Any, out: TextIO) -> list[tuple[Any, str | None]]:
    """Print the module paths each intervention of `spec` edits in `model` (the engine's selection,
    `layers` included); returns those that edit none (an error when the edits run, unless `strict=False`),
    each with why when it is not that the selector matches nothing (`layers` out of range)."""
    from .._trace_checks import dead_hints
    from ..engine import edited_modules, scope_modules
    from ..errors import SpecError

    modules = scope_modules(model, "", ())
    dead: list[tuple[Any, str | None]] = []
    for edit in spec.interventions:
        try:
            hooked = [path[1:] or "<root>" for _, path in edited_modules(model, edit)]
        except ValueError as e:  # `layers` beyond the modules it counts (a SpecError located at the edit)
            why = "; ".join(issue.message for issue in e.issues) if isinstance(e, SpecError) else str(e)
            dead.append((edit, why))
            print(f"intervention {describe(edit)}: {why}", file=out)
            continue
        if hooked:
            print(f"intervention {describe(edit)}: {len(hooked)} module(s): {', '.join(hooked)}", file=out)
        else:
            dead.append((edit, None))
            print(f"intervention {describe(edit)}: MATCHES NOTHING{dead_hints(edit.select, modules)}", file=out)
    return dead
