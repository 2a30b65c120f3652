"""PreTrainedModel: the minimal model base that capture builds on, saved and loaded with its spec."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from ..checkpoint import load_yamltrace_model, save_yamltrace_model
from ..engine import CaptureMap, normalize_output_map
from ._config import Config

__all__ = ["PreTrainedModel"]


class PreTrainedModel(nn.Module):
    """Base class of yamltrace models: a `config` and a class-level capture map.

    Subclasses declare `_can_record_outputs` (output key -> recorder or list of recorders), decorate the
    base model's `forward` with `merge_with_config_defaults` and `capture_outputs`, and call
    `post_init()` at the end of `__init__`.
    """

    config_class: ClassVar[type[Config]] = Config
    _can_record_outputs: ClassVar[CaptureMap | None] = None

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.config = config
        self.gradient_checkpointing = False

    def post_init(self) -> None:
        """Check the class's capture map once the model is built, so a bad map fails at construction."""
        normalize_output_map(self._can_record_outputs)

    def save_pretrained(self, directory: str | os.PathLike[str], *, spec: Any = None) -> Path:
        """Write `config.json`, `model.safetensors` and `yamltrace.yaml` (`spec` as written, else the attached one, else none)."""
        return save_yamltrace_model(self, directory, spec=spec)

    @classmethod
    def from_pretrained(
        cls,
        directory: str | os.PathLike[str],
        *,
        spec: Any = None,
        overrides: Any = None,
        trust_imports: bool = False,
        device: str | torch.device | None = None,
        dtype: torch.dtype | None = None,
    ) -> PreTrainedModel:
        """Load a checkpoint with its spec: `spec=` replaces the shipped `yamltrace.yaml`, `overrides=`
        overlays it key by key. The spec is resolved before any weight is read; its patches apply while
        the model is built; the loaded model captures what the spec declares (`model.yamltrace_spec`)."""
        return load_yamltrace_model(
            cls, directory, spec=spec, overrides=overrides, trust_imports=trust_imports, device=device, dtype=dtype
        )
