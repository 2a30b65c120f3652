"""YAML text -> validated document -> resolved `Spec`.

`_reader` parses YAML safely into plain data with node locations (`extends` merged); `_schema`
checks it against the JSON Schema; `_registry` turns class names into classes (with import consent);
`_resolve` builds the immutable `Spec`; `_export` writes a model's own capture map as a `Spec`.
Reading and validating import neither torch nor the model's code; resolution does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from ._reader import DEFAULT_MAX_BYTES, MAX_DEPTH, SpecDocument, read_spec_document
from ._registry import (
    ENTRY_POINT_GROUP,
    ClassRegistry,
    ImportPolicy,
    default_registry,
    list_classes,
    register_class,
    resolve_class,
    unregister_class,
)
from ._schema import SCHEMA_FILE, SCHEMA_ID, load_schema, schema_path, validate_spec

__all__ = [
    "DEFAULT_MAX_BYTES",
    "ENTRY_POINT_GROUP",
    "MAX_DEPTH",
    "SCHEMA_FILE",
    "SCHEMA_ID",
    "ClassRegistry",
    "ImportPolicy",
    "PatchEntry",
    "Spec",
    "SpecDocument",
    "default_registry",
    "list_classes",
    "load_schema",
    "schema_path",
    "load_spec",
    "read_spec_document",
    "register_class",
    "resolve_class",
    "spec_from_model",
    "unregister_class",
    "validate_spec",
]

# Resolution imports torch: these load on first use.
__getattr__, __dir__ = lazy_exports(
    __name__,
    globals(),
    {"PatchEntry": "._spec", "Spec": "._spec", "load_spec": "._resolve", "spec_from_model": "._export"},
)

if TYPE_CHECKING:
    from ._export import spec_from_model
    from ._resolve import load_spec
    from ._spec import PatchEntry, Spec
