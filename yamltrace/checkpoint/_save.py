"""Model -> checkpoint: config, weights and `yamltrace.yaml` side by side."""

from __future__ import annotations

import os
from pathlib import Path

from torch import nn

from ._load import is_yamltrace_model
from ._spec_file import SpecSource, spec_text, tensor_files, write_spec
from ._weights import CONFIG_FILE, write_weights

__all__ = ["save_pretrained", "save_yamltrace_model"]


def save_yamltrace_model(
    model: nn.Module, directory: str | os.PathLike[str], *, spec: SpecSource | None = None, trust_imports: bool = False
) -> Path:
    """Write a yamltrace model's `config.json`, `model.safetensors` and, when there is a spec, `yamltrace.yaml`."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    text, resolved = spec_text(model, spec, trust_imports=trust_imports)  # a bad spec fails before anything is written
    files = tensor_files(resolved)
    getattr(model, "config").save(directory / CONFIG_FILE)
    write_weights(model, directory)
    write_spec(directory, text, files)
    return directory


def save_pretrained(
    model: nn.Module, directory: str | os.PathLike[str], *, spec: SpecSource | None = None, trust_imports: bool = False
) -> Path:
    """Save `model` (yamltrace or transformers) with its spec beside its files.

    `spec` (a path, YAML text or bytes: copied byte for byte once it validates; `builtin:NAME`: the
    shipped spec's text; a `Spec` or a mapping: rendered with `to_yaml`) is written as `yamltrace.yaml`; without it, the spec attached by
    `from_pretrained`, if any. A model with neither is saved without a spec file.

    Args:
        model: the model to save.
        directory: the checkpoint folder (created if needed).
        spec: the spec to ship with it.
        trust_imports: as for `load_spec`: the spec is validated and resolved against the model first.

    Returns:
        The folder written.

    Raises:
        SpecError: the spec has a problem; nothing is written.

    Example:
        >>> yamltrace.save_pretrained(model, "ckpt", spec="specs/tiny.yaml")   # doctest: +SKIP
        PosixPath('ckpt')
    """
    if is_yamltrace_model(type(model)):
        return save_yamltrace_model(model, directory, spec=spec, trust_imports=trust_imports)
    directory = Path(directory)
    text, resolved = spec_text(model, spec, trust_imports=trust_imports)
    files = tensor_files(resolved)
    getattr(model, "save_pretrained")(directory)
    write_spec(directory, text, files)
    return directory
