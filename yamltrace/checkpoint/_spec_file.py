"""The spec beside the weights: which spec a load uses (`checkpoint_spec`), overlays, and writing it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Union

from torch import nn

from ..spec import PatchEntry, Spec, load_spec, spec_from_model

__all__ = ["SPEC_FILE", "SpecSource", "checkpoint_spec", "overlay_spec", "write_spec"]

SPEC_FILE = "yamltrace.yaml"

SpecSource = Union[Spec, str, os.PathLike, Mapping[str, Any]]


def overlay_spec(base: Spec, override: Spec) -> Spec:
    """`base` with `override`'s keys on top: outputs, options and patches key by key, override winning."""
    patches: dict[str, PatchEntry] = {entry.pattern: entry for entry in base.patches}
    patches.update((entry.pattern, entry) for entry in override.patches)
    return Spec(
        outputs={**base.outputs, **override.outputs},
        patches=tuple(patches.values()),
        options={**base.options, **override.options},
        source=override.source or base.source,
        model=override.model or base.model,
        imports=tuple(dict.fromkeys(base.imports + override.imports)),
        scopes={**base.scopes, **override.scopes},
    )


def _override_source(overrides: SpecSource, base: Spec | None) -> SpecSource:
    """A mapping override may be partial: the format version and the base's imports are filled in."""
    if not isinstance(overrides, Mapping) or isinstance(overrides, Spec):
        return overrides
    filled = dict(overrides)
    filled.setdefault("yamltrace", 1)
    if base is not None and base.imports:
        filled.setdefault("imports", list(base.imports))
    return filled


def checkpoint_spec(
    model_cls: type,
    directory: str | os.PathLike[str],
    *,
    spec: SpecSource | None = None,
    overrides: SpecSource | None = None,
    trust_imports: bool = False,
) -> Spec | None:
    """The spec a load uses: `spec=`, else the checkpoint's `yamltrace.yaml` overlaid by `overrides=`.

    Everything is validated and resolved here, before a model is built or a weight is read.
    """
    if spec is not None and overrides is not None:
        raise ValueError("Pass spec= (replaces the checkpoint's spec) or overrides= (overlays it), not both.")
    if spec is not None:
        return load_spec(spec, trust_imports=trust_imports, for_model=model_cls)
    shipped = Path(directory) / SPEC_FILE
    base = load_spec(shipped, trust_imports=trust_imports, for_model=model_cls) if shipped.is_file() else None
    if overrides is None:
        return base
    override = load_spec(_override_source(overrides, base), trust_imports=trust_imports, for_model=model_cls)
    return override if base is None else overlay_spec(base, override)


def write_spec(model: nn.Module, directory: Path, spec: SpecSource | None) -> Path | None:
    """Write `yamltrace.yaml`: `spec` (validated), else the attached spec, else the model's own map."""
    if spec is not None:
        resolved = load_spec(spec, for_model=model)
    else:
        resolved = getattr(model, "yamltrace_spec", None)
        if resolved is None and getattr(type(model), "_can_record_outputs", None):
            resolved = spec_from_model(type(model))
    if resolved is None:
        return None
    path = directory / SPEC_FILE
    path.write_text(resolved.to_yaml(), encoding="utf-8")
    return path
