"""The one walk over a spec's recorders: the root `outputs`, then each scope's, with their JSON paths.

The content checks (`_limits`), the resolver, `Spec.to_yaml` and `trace`'s checks all walk a spec
here, on a document's plain data (`document_sections`) or on a resolved `Spec` (`sections` of its
outputs and scopes), so none of them can skip `scopes:`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

__all__ = ["Section", "Site", "document_sections", "section_path", "sections", "sites"]

Path = tuple[str | int, ...]


class Section(NamedTuple):
    """One `outputs` mapping of a spec: `scope` is its submodule path ("" for the root), `path` the JSON
    path of the mapping (`("outputs",)` or `("scopes", scope, "outputs")`)."""

    scope: str
    path: Path
    outputs: Mapping[str, Any]


class Site(NamedTuple):
    """One recorder as written: its section's scope, its key, its position among the key's recorders,
    its JSON path (a recorder written alone, not in a list, has no position in its path) and its value."""

    scope: str
    key: str
    position: int
    path: Path
    value: Any


def section_path(scope: str) -> Path:
    """The JSON path of the `outputs` mapping of `scope` ("" for the root)."""
    return ("scopes", scope, "outputs") if scope else ("outputs",)


def sections(outputs: Mapping[str, Any], scopes: Mapping[str, Mapping[str, Any]]) -> list[Section]:
    """The root section, when it records something or there are no scopes, then each scope's in order.

    A spec of scopes alone has no root section: its root records nothing, and `to_yaml` writes no
    top-level `outputs` for it.
    """
    found = [Section("", section_path(""), outputs)] if outputs or not scopes else []
    return found + [Section(scope, section_path(scope), value) for scope, value in scopes.items()]


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def document_sections(data: Mapping[str, Any]) -> list[Section]:
    """`sections` of a document's plain data; a part of the wrong type counts as empty (the schema
    reports it)."""
    scopes = {str(scope): _mapping(_mapping(value).get("outputs")) for scope, value in _mapping(data.get("scopes")).items()}
    return sections(_mapping(data.get("outputs")), scopes)


def sites(section: Section) -> Iterator[Site]:
    """Every recorder of a section: a key's list (or tuple) item by item, else the one recorder."""
    for key, value in section.outputs.items():
        if isinstance(value, (list, tuple)):
            for position, item in enumerate(value):
                yield Site(section.scope, key, position, (*section.path, key, position), item)
        else:
            yield Site(section.scope, key, 0, (*section.path, key), value)
