"""The spec beside the weights: which spec a load uses (`checkpoint_spec`), overlays, and writing it.

A spec is saved as written: a file or text given to `save_pretrained` is copied byte for byte (after
it validates and resolves), so comments, flow style and bare names survive. A `Spec` object, a
mapping, an attached spec, or a file that `extends` a base (a checkpoint must stand alone) is
rendered with `Spec.to_yaml`. No spec is written unless one is given or attached.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Union

import torch
from torch import nn

from .._folder import bare_name
from ..engine import attached_spec
from .. import specs
from ..spec import PatchEntry, Spec, load_spec, validate_spec

__all__ = ["SPEC_FILE", "SpecSource", "checkpoint_spec", "overlay_spec", "spec_text", "tensor_files", "write_spec"]

logger = logging.getLogger("yamltrace.checkpoint")

SPEC_FILE = "yamltrace.yaml"

SpecSource = Union[Spec, str, bytes, "os.PathLike[str]", Mapping[str, Any]]


def overlay_spec(base: Spec, override: Spec) -> Spec:
    """`base` with `override`'s keys on top: outputs, options, patches and interventions key by key,
    override winning (an intervention keeps its place in the base's order; new ones come after)."""
    patches: dict[str, PatchEntry] = {entry.pattern: entry for entry in base.patches}
    patches.update((entry.pattern, entry) for entry in override.patches)
    interventions = {edit.name: edit for edit in base.interventions}
    interventions.update((edit.name, edit) for edit in override.interventions)
    return Spec(
        outputs={**base.outputs, **override.outputs},
        patches=tuple(patches.values()),
        options={**base.options, **override.options},
        source=override.source or base.source,
        model=override.model or base.model,
        imports=tuple(dict.fromkeys(base.imports + override.imports)),
        scopes={**base.scopes, **override.scopes},
        interventions=tuple(interventions.values()),
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
    shipped: Path | None,
    *,
    spec: SpecSource | None = None,
    overrides: SpecSource | None = None,
    trust_imports: bool = False,
) -> Spec | None:
    """The spec a load uses: `spec=`, else the checkpoint's spec file `shipped` (None: it has none)
    overlaid by `overrides=`.

    Everything is validated and resolved here, before a model is built or a weight is read.
    """
    if spec is not None and overrides is not None:
        raise ValueError("Pass spec= (replaces the checkpoint's spec) or overrides= (overlays it), not both.")
    if spec is not None:
        return load_spec(spec, trust_imports=trust_imports, for_model=model_cls)
    base = load_spec(shipped, trust_imports=trust_imports, for_model=model_cls) if shipped is not None else None
    if overrides is None:
        return base
    override = load_spec(_override_source(overrides, base), trust_imports=trust_imports, for_model=model_cls)
    return override if base is None else overlay_spec(base, override)


def spec_text(model: nn.Module, spec: SpecSource | None, *, trust_imports: bool = False) -> tuple[bytes | None, Spec | None]:
    """What `yamltrace.yaml` holds for `model`: `spec` as written (validated and resolved first), else
    the attached spec rendered; None when there is neither. Also the resolved spec (its tensor files)."""
    if spec is None:
        attached = attached_spec(model)
        return (None, None) if attached is None else (attached.to_yaml().encode("utf-8"), attached)
    resolved = load_spec(spec, trust_imports=trust_imports, for_model=model)
    if isinstance(spec, str) and spec.startswith(specs.PREFIX):  # a shipped spec: its file's text
        return specs.path(spec).read_bytes(), resolved
    if isinstance(spec, (Spec, Mapping)):
        return resolved.to_yaml().encode("utf-8"), resolved
    document = validate_spec(spec)
    if len(document.files) > (1 if document.file else 0):  # it extends a base file
        return resolved.to_yaml().encode("utf-8"), resolved
    if document.file is not None:
        return Path(document.file).read_bytes(), resolved
    return (spec if isinstance(spec, bytes) else os.fspath(spec).encode("utf-8")), resolved


def tensor_files(spec: Spec | None) -> dict[str, dict[str, torch.Tensor]]:
    """The safetensors files a spec's interventions read their tensors from (`FILE.safetensors:NAME`):
    file -> name -> tensor, what a checkpoint folder must hold beside `yamltrace.yaml`. A FolderError
    for a file that is not a bare file name (it would be written outside the folder)."""
    files: dict[str, dict[str, torch.Tensor]] = {}
    for edit in () if spec is None else spec.interventions:
        if isinstance(edit.value, torch.Tensor) and edit.reference is not None:
            file, _, name = edit.reference.partition(":")  # as the loader splits it
            files.setdefault(bare_name(file, what="tensor file"), {})[name] = edit.value.detach().cpu().contiguous()
    return files


def write_spec(
    directory: Path, text: bytes | None, files: Mapping[str, Mapping[str, torch.Tensor]] = MappingProxyType({})
) -> Path | None:
    """Write `text` (see `spec_text`) as `yamltrace.yaml`, and the tensor files of its interventions
    beside it (`tensor_files`). With no spec to write, a `yamltrace.yaml` left in `directory` by an
    earlier save is removed, so it cannot pair with these weights."""
    path = directory / SPEC_FILE
    if text is None:
        if path.is_file():
            path.unlink()
            logger.info("Removed %s: the saved model has no spec (pass spec= to save one).", path)
        return None
    from safetensors.torch import save_file

    for file, tensors in files.items():
        save_file({name: t.clone() for name, t in tensors.items()}, str(directory / file))
    path.write_bytes(text)
    return path
