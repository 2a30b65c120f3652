"""Which model `yamltrace check` builds for a spec, and building it once on the meta device.

The model is `--model` (with `--config`), or `--checkpoint`'s `config.json`, or else the spec's own
`model:` key. Models are built on the meta device (no weight memory, no weights read) with the
attention implementation the spec states; specs that need the same class, config and attention
implementation share one build.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

from ._common import _Usage, import_class, model_config

__all__ = ["ModelSource", "Models", "source_from_arguments"]


class ModelSource(NamedTuple):
    """A model class and the config file to build it with (None: its default config)."""

    cls: type
    config_file: Path | None


def _from_checkpoint(directory: Path, model: str | None) -> ModelSource:
    config_file = directory / "config.json"
    if not config_file.is_file():
        raise _Usage(f"--checkpoint {directory}: no config.json there")
    if model is not None:
        return ModelSource(import_class(model), config_file)
    architectures = json.loads(config_file.read_text(encoding="utf-8")).get("architectures") or []
    import transformers

    cls = getattr(transformers, architectures[0], None) if architectures else None
    if cls is None:
        raise _Usage(f"--checkpoint {directory}: config.json names no transformers architecture; add --model pkg.mod:Class")
    return ModelSource(cls, config_file)


def source_from_arguments(model: str | None, config: str | None, checkpoint: str | None) -> ModelSource | None:
    """The model the command line names, or None (each spec's `model:` key names its own)."""
    if checkpoint is not None:
        return _from_checkpoint(Path(checkpoint), model)
    if model is not None:
        return ModelSource(import_class(model), None if config is None else Path(config))
    if config is not None:
        raise _Usage("--config needs --model pkg.mod:Class")
    return None


class Models:
    """Models built on the meta device, one per class, config file and attention implementation."""

    def __init__(self) -> None:
        self.built: dict[tuple[type, Path | None, Any], Any] = {}

    def get(self, source: ModelSource, spec: Any) -> Any:
        """The model for `source` with the attention implementation `spec` states, built on first use."""
        import torch

        from ..checkpoint import configure_attn_implementation

        config = model_config(*source)
        key = (source.cls, source.config_file, configure_attn_implementation(config, spec))
        if key not in self.built:
            with torch.device("meta"):
                self.built[key] = source.cls(config)
        return self.built[key]
