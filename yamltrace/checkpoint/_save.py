"""Model -> checkpoint: config, weights and `yamltrace.yaml` side by side."""

from __future__ import annotations

import os
from pathlib import Path

from torch import nn

from ._load import is_yamltrace_model
from ._spec_file import SpecSource, write_spec
from ._weights import CONFIG_FILE, write_weights

__all__ = ["save_pretrained", "save_yamltrace_model"]


def save_yamltrace_model(model: nn.Module, directory: str | os.PathLike[str], *, spec: SpecSource | None = None) -> Path:
    """Write a yamltrace model's `config.json`, weights and `yamltrace.yaml` into `directory`."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model.config.save(directory / CONFIG_FILE)
    write_weights(model, directory)
    write_spec(model, directory, spec)
    return directory


def save_pretrained(model: nn.Module, directory: str | os.PathLike[str], *, spec: SpecSource | None = None) -> Path:
    """Save `model` (yamltrace or transformers) with `yamltrace.yaml` beside its files."""
    if is_yamltrace_model(type(model)):
        return save_yamltrace_model(model, directory, spec=spec)
    directory = Path(directory)
    model.save_pretrained(directory)
    write_spec(model, directory, spec)
    return directory
