"""`check`: a recorder's `layers` that the model does not have is a located problem.

`trace` keeps the positions `layers` selects of a key; the key has one position per layer (the
config's layer count, `num_hidden_layers_key`, else the modules the key hooks), one more for
`hidden_states` with its initial state (`engine.position_counter`, the rule capture follows). An index
outside `-count..count-1` selects nothing, so `layers: [40]` on a 32-layer model would capture
nothing; here it is `file:line:col: $.outputs.KEY.layers: ...` with the valid range.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import SpecIssue

__all__ = ["layer_issues"]

# One row of `check`'s recorders: (label, scope, key, position, recorder, hooked module paths, hints).
Row = tuple[str, str, str, int, Any, list[str], str]


def layer_issues(spec: Any, model: Any, rows: Sequence[Row]) -> list[SpecIssue]:
    """A located problem for each recorder whose `layers` name a position its key does not have."""
    from ..engine import position_counter

    wanted = [row for row in rows if row[4].layers is not None and row[5]]
    if not wanted or spec.source is None:
        return []
    hooked: dict[tuple[str, str], int] = {}
    for _, scope, key, _, _, paths, _ in rows:
        hooked[(scope, key)] = hooked.get((scope, key), 0) + len(paths)
    config = getattr(model, "config", None)
    located = _layers_nodes(spec.source)
    issues = []
    for _, scope, key, position, recorder, _, _ in wanted:
        count = position_counter(config, {key: hooked[(scope, key)]})(key, recorder)
        if not count:
            continue
        outside = [i for i in recorder.layers if not -count <= i < count]
        if not outside:
            continue
        layers = getattr(config, recorder.num_hidden_layers_key, None)
        counted = (
            f"config.{recorder.num_hidden_layers_key} = {layers}"
            if layers is not None
            else f"{hooked[(scope, key)]} module(s) hooked"
        )
        source = counted + (" and its initial state" if key == "hidden_states" and recorder.capture_initial_hidden_state else "")
        message = (
            f"{'layer' if len(outside) == 1 else 'layers'} {', '.join(map(str, outside))} out of range: {key!r} has "
            f"{count} position(s) on {type(model).__name__} ({source}); valid indices are {-count}..{count - 1}"
        )
        issue = located(scope, key, position, message)
        issues.append(issue if issue is not None else SpecIssue(message, spec.where(scope, key, position).json_path, spec.source))
    return issues


def _layers_nodes(file: str) -> Any:
    """A function (scope, key, position, message) -> the issue located at that recorder's `layers` node, or None."""
    from ..spec import validate_spec
    from ..spec._walk import document_sections, sites

    document = validate_spec(Path(file))
    paths = {
        (site.scope, site.key, site.position): site.path
        for section in document_sections(document.data)
        for site in sites(section)
    }

    def locate(scope: str, key: str, position: int, message: str) -> SpecIssue | None:
        path = paths.get((scope, key, position))
        return None if path is None else document.issue((*path, "layers"), message)

    return locate
