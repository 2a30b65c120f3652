"""What `trace` and `intervene` take as a spec (`SpecLike`), and the `Spec` it names (`as_spec`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Union

from torch import nn

from ._trace_checks import check_patches, retarget_to_patches
from .spec import Spec, load_spec

__all__ = ["SpecLike", "as_spec"]

# A Spec, a spec file or `builtin:NAME`, a spec document, or a `_can_record_outputs`-style dict.
SpecLike = Union[Spec, str, "os.PathLike[str]", Mapping[str, Any]]


def as_spec(model: nn.Module, spec: SpecLike) -> Spec:
    """The `Spec` a `spec` argument names (a file, `builtin:NAME`, a spec document: a mapping with
    `yamltrace` or `interventions`, a capture dict), checked for unapplied patches and retargeted to
    the model's patched classes."""
    if isinstance(spec, (str, os.PathLike)):
        spec = load_spec(spec, for_model=model)
    elif isinstance(spec, Mapping) and not isinstance(spec, Spec):
        spec = load_spec(spec, for_model=model) if "yamltrace" in spec or "interventions" in spec else Spec(outputs=spec)
    if not isinstance(spec, Spec):
        raise TypeError(f"trace() takes a Spec, a spec path or a capture dict, got {type(spec).__name__}.")
    check_patches(model, spec)
    return retarget_to_patches(model, spec)
