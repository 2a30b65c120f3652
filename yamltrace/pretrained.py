"""Checkpoints that carry their spec: `save_pretrained` / `from_pretrained` for yamltrace and transformers models.

A checkpoint directory holds `config.json`, the weights and `yamltrace.yaml`. Loading reads the config,
then the spec (the checkpoint's, replaced by `spec=` or overlaid by `overrides=`), validates and
resolves it before any weights are read, builds the model under the spec's patches, retargets the
recorders, loads the weights strictly and attaches the spec. A failed load changes nothing: the patch
registry, the patched modules and `sys.modules` are as they were.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .patching import apply_patches, patch_output_recorders
from .spec import PatchEntry, Spec, load_spec, spec_from_model

__all__ = [
    "SPEC_FILE",
    "checkpoint_spec",
    "from_pretrained",
    "load_yamltrace_model",
    "overlay_spec",
    "save_pretrained",
    "save_yamltrace_model",
]

SPEC_FILE = "yamltrace.yaml"
CONFIG_FILE = "config.json"
SAFETENSORS_FILE = "model.safetensors"
TORCH_FILE = "pytorch_model.bin"

SpecSource = Spec | str | os.PathLike[str] | Mapping[str, Any]


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
        config_defaults=override.config_defaults or base.config_defaults,
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


@contextlib.contextmanager
def _spec_imports_undone_on_failure() -> Iterator[Callable[[], None]]:
    """On failure, forget the modules the spec's resolution imported, so `sys.modules` is as it was.

    Yields a function to call once the spec is resolved. Modules that torch or transformers import
    lazily afterwards, while building or loading, are left alone: removing those would leave two
    copies of one library module in the process.
    """
    before = set(sys.modules)
    spec_imports: set[str] | None = None

    def spec_resolved() -> None:
        nonlocal spec_imports
        spec_imports = set(sys.modules) - before

    try:
        yield spec_resolved
    except BaseException:
        for name in (set(sys.modules) - before) if spec_imports is None else spec_imports:
            sys.modules.pop(name, None)
        raise


def _attach(model: nn.Module, spec: Spec | None, device: str | torch.device | None) -> nn.Module:
    """Give the model the spec's capture map (per instance), retargeted to the patched classes."""
    if spec is None:
        return model
    model._can_record_outputs = spec.capture_map()
    patch_output_recorders(model, spec, device=device)
    model.yamltrace_spec = spec
    return model


def _device_type(device: str | torch.device | None) -> str | None:
    return None if device is None else torch.device(device).type


def _weights_file(directory: Path) -> Path:
    for name in (SAFETENSORS_FILE, TORCH_FILE):
        if (directory / name).is_file():
            return directory / name
    raise FileNotFoundError(f"{directory} holds no weights: expected {SAFETENSORS_FILE} or {TORCH_FILE}.")


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
    if path.name == SAFETENSORS_FILE:
        from safetensors.torch import load_file

        return load_file(str(path))
    return torch.load(path, map_location="cpu", weights_only=True)


def _write_weights(model: nn.Module, directory: Path) -> Path:
    try:
        from safetensors.torch import save_model
    except ImportError:
        path = directory / TORCH_FILE
        torch.save(model.state_dict(), path)
        return path
    path = directory / SAFETENSORS_FILE
    save_model(model, str(path))
    return path


def _load_strict(model: nn.Module, state: Mapping[str, torch.Tensor], source: Path) -> None:
    expected = set(model.state_dict())
    missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
    if missing or unexpected:
        raise ValueError(
            f"Weights in {source} do not match {type(model).__name__}: missing keys {missing}, unexpected keys {unexpected}."
        )
    model.load_state_dict(state, strict=True)


def _write_spec(model: nn.Module, directory: Path, spec: SpecSource | None) -> Path | None:
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


def save_yamltrace_model(model: nn.Module, directory: str | os.PathLike[str], *, spec: SpecSource | None = None) -> Path:
    """Write a yamltrace model's `config.json`, weights and `yamltrace.yaml` into `directory`."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model.config.save(directory / CONFIG_FILE)
    _write_weights(model, directory)
    _write_spec(model, directory, spec)
    return directory


def load_yamltrace_model(
    cls: type[nn.Module],
    directory: str | os.PathLike[str],
    *,
    spec: SpecSource | None = None,
    overrides: SpecSource | None = None,
    trust_imports: bool = False,
    device: str | torch.device | None = None,
    dtype: torch.dtype | None = None,
) -> nn.Module:
    """Load a yamltrace `PreTrainedModel` subclass from a checkpoint directory (see module docstring)."""
    directory = Path(directory)
    if not (directory / CONFIG_FILE).is_file():
        raise FileNotFoundError(f"{directory} is not a checkpoint: {CONFIG_FILE} is missing.")
    config = cls.config_class.load(directory / CONFIG_FILE)
    weights = _weights_file(directory)
    model, resolved = _build_under_spec(
        cls,
        directory,
        lambda: cls(config),
        lambda model: _load_strict(model, _read_weights(weights), weights),
        spec=spec,
        overrides=overrides,
        trust_imports=trust_imports,
        device=device,
    )
    model.to(device=device, dtype=dtype)
    return _attach(model, resolved, device)


def _build_under_spec(
    model_cls: type,
    directory: str | os.PathLike[str],
    construct: Callable[[], nn.Module],
    finish: Callable[[nn.Module], None] | None = None,
    *,
    spec: SpecSource | None,
    overrides: SpecSource | None,
    trust_imports: bool,
    device: str | torch.device | None,
) -> tuple[nn.Module, Spec | None]:
    """Resolve the checkpoint's spec, `construct` the model under its patches, then `finish` it.

    All or nothing: on failure the patched classes are back and the spec's imports are forgotten.
    """
    with _spec_imports_undone_on_failure() as spec_resolved:
        resolved = checkpoint_spec(model_cls, directory, spec=spec, overrides=overrides, trust_imports=trust_imports)
        spec_resolved()
        with apply_patches(resolved or {}, modules=model_cls, device=_device_type(device) or "cpu"):
            model = construct()
        if finish is not None:
            finish(model)
    return model, resolved


def _transformers_model_class(cls: type, directory: str | os.PathLike[str]) -> type:
    """The concrete class a transformers (Auto) class builds for this checkpoint."""
    mapping = getattr(cls, "_model_mapping", None)
    if mapping is None:
        return cls
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(directory)
    return mapping[type(config)]


def _is_yamltrace_model(cls: Any) -> bool:
    from .modeling import PreTrainedModel

    return isinstance(cls, type) and issubclass(cls, PreTrainedModel)


def from_pretrained(
    cls: type,
    path: str | os.PathLike[str],
    *,
    spec: SpecSource | None = None,
    overrides: SpecSource | None = None,
    trust_imports: bool = False,
    device: str | torch.device | None = None,
    dtype: torch.dtype | None = None,
    **kwargs: Any,
) -> nn.Module:
    """Load `cls` (a yamltrace model class, a transformers model class or Auto class) with its spec.

    Reads `path/yamltrace.yaml` when present; `spec=` replaces it, `overrides=` overlays it key by key.
    Patches apply while the model is built (scoped to that load; the process-wide patch registry is not
    touched), recorders are retargeted to the replacements, and `trace(model)` uses the spec. Extra
    keyword arguments go to transformers' `from_pretrained`.
    """
    if _is_yamltrace_model(cls):
        if kwargs:
            raise TypeError(f"Unexpected arguments for a yamltrace model: {sorted(kwargs)}.")
        return load_yamltrace_model(
            cls, path, spec=spec, overrides=overrides, trust_imports=trust_imports, device=device, dtype=dtype
        )
    model_cls = _transformers_model_class(cls, path)
    if dtype is not None:
        kwargs["dtype"] = dtype
    model, resolved = _build_under_spec(
        model_cls,
        path,
        lambda: cls.from_pretrained(path, **kwargs),
        spec=spec,
        overrides=overrides,
        trust_imports=trust_imports,
        device=device,
    )
    if device is not None:
        model.to(device)
    return _attach(model, resolved, device)


def save_pretrained(model: nn.Module, directory: str | os.PathLike[str], *, spec: SpecSource | None = None) -> Path:
    """Save `model` (yamltrace or transformers) with `yamltrace.yaml` beside its files."""
    if _is_yamltrace_model(type(model)):
        return save_yamltrace_model(model, directory, spec=spec)
    directory = Path(directory)
    model.save_pretrained(directory)
    _write_spec(model, directory, spec)
    return directory

