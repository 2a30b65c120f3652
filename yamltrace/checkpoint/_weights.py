"""Weights on disk: find, read and write them, and load them strictly into a model."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn

__all__ = ["CONFIG_FILE", "SAFETENSORS_FILE", "TORCH_FILE", "weights_file", "read_weights", "write_weights", "load_strict"]

CONFIG_FILE = "config.json"
SAFETENSORS_FILE = "model.safetensors"
TORCH_FILE = "pytorch_model.bin"


def weights_file(directory: Path) -> Path:
    for name in (SAFETENSORS_FILE, TORCH_FILE):
        if (directory / name).is_file():
            return directory / name
    raise FileNotFoundError(f"{directory} holds no weights: expected {SAFETENSORS_FILE} or {TORCH_FILE}.")


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    if path.name == SAFETENSORS_FILE:
        from safetensors.torch import load_file

        return load_file(str(path))
    return torch.load(path, map_location="cpu", weights_only=True)


def write_weights(model: nn.Module, directory: Path) -> Path:
    try:
        from safetensors.torch import save_model
    except ImportError:
        path = directory / TORCH_FILE
        torch.save(model.state_dict(), path)
        return path
    path = directory / SAFETENSORS_FILE
    save_model(model, str(path))
    return path


def load_strict(model: nn.Module, state: Mapping[str, torch.Tensor], source: Path) -> None:
    expected = set(model.state_dict())
    missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
    if missing or unexpected:
        raise ValueError(
            f"Weights in {source} do not match {type(model).__name__}: missing keys {missing}, unexpected keys {unexpected}."
        )
    model.load_state_dict(state, strict=True)
