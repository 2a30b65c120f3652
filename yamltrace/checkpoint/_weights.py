"""Weights on disk: find, read and write them, and load them strictly into a model.

safetensors is the format written (`model.safetensors`). Read: `model.safetensors`, a sharded
checkpoint (`model.safetensors.index.json` naming its shard files), and, for older checkpoints,
`pytorch_model.bin` (or its sharded index) through `torch.load(weights_only=True)`, which refuses
pickled code.

A checkpoint folder is downloaded, so every file is read under the folder rule (`yamltrace._folder`):
bare shard names, regular files only (a FIFO would block), no link out of the folder, the shard index
and each safetensors header capped in size before they are parsed.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn

from .._folder import bare_name, folder_file, read_json, safetensors_header
from .._lazy import TORCH_EXTRA
from ..patch._state import with_renamed_state

__all__ = [
    "CONFIG_FILE",
    "SAFETENSORS_FILE",
    "SAFETENSORS_INDEX",
    "TORCH_FILE",
    "TORCH_INDEX",
    "WEIGHT_FILES",
    "weights_file",
    "read_weights",
    "write_weights",
    "load_strict",
]

CONFIG_FILE = "config.json"
SAFETENSORS_FILE = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
TORCH_FILE = "pytorch_model.bin"
TORCH_INDEX = "pytorch_model.bin.index.json"
# In order of preference when a directory holds several.
WEIGHT_FILES = (SAFETENSORS_FILE, SAFETENSORS_INDEX, TORCH_FILE, TORCH_INDEX)
MAX_SHARD_INDEX_BYTES = 64 * 2**20  # bytes of a shard index (a 100,000-tensor model's is about 10 MB)


def weights_file(directory: Path) -> Path:
    """The weights file (or shard index) of a checkpoint directory; FileNotFoundError naming what was looked for.

    A candidate that exists but is not a regular file inside the folder is a FolderError, not skipped.
    """
    for name in WEIGHT_FILES:
        found = folder_file(directory, name, what="weights file", missing_ok=True)
        if found is not None:
            return found
    raise FileNotFoundError(f"{directory} holds no weights: expected {', '.join(WEIGHT_FILES[:-1])} or {WEIGHT_FILES[-1]}.")


def _read_one(directory: Path, name: str) -> dict[str, torch.Tensor]:
    path = folder_file(directory, name, what="weights file")
    if name.endswith(".safetensors"):
        from safetensors.torch import load_file

        safetensors_header(directory, name, what="weights file")
        return load_file(str(path))
    state = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(state, dict):
        raise ValueError(f"{path} does not hold a state dict (found {type(state).__name__}).")
    return state


def _read_sharded(index: Path) -> dict[str, torch.Tensor]:
    """All shards an index names; every tensor must be in the shard the index says, and shards stay in the folder."""
    document = read_json(index.parent, index.name, max_bytes=MAX_SHARD_INDEX_BYTES, what="shard index")
    weight_map = document.get("weight_map") if isinstance(document, dict) else None
    if not isinstance(weight_map, dict):
        raise ValueError(f"{index} is not a shard index: expected a JSON object with a 'weight_map' object.")
    shards = {bare_name(shard, what=f"{index}: shard") for shard in weight_map.values()}
    state: dict[str, torch.Tensor] = {}
    for shard in sorted(shards):
        tensors = _read_one(index.parent, shard)
        listed = {name for name, where in weight_map.items() if where == shard}
        if listed - set(tensors):
            raise ValueError(f"{index}: {shard} lacks {sorted(listed - set(tensors))}, which the index places there.")
        state.update((name, tensors[name]) for name in listed)
    return state


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """A state dict from a weights file or a shard index (`*.index.json`) of a checkpoint folder."""
    return _read_sharded(path) if path.name.endswith(".index.json") else _read_one(path.parent, path.name)


def write_weights(model: nn.Module, directory: Path) -> Path:
    """Write the model's weights as `model.safetensors` (shared tensors stored once)."""
    try:
        from safetensors.torch import save_model
    except ModuleNotFoundError as e:
        raise ImportError(f"Saving weights needs safetensors: pip install '{TORCH_EXTRA}'.", name="safetensors") from e
    path = directory / SAFETENSORS_FILE
    save_model(model, str(path))
    return path


def _aliases(model: nn.Module) -> dict[str, set[str]]:
    """For each state-dict name, the other names that hold the very same tensor (tied weights)."""
    by_tensor: dict[tuple[int, torch.Size], set[str]] = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        if tensor.device.type != "meta":
            by_tensor.setdefault((tensor.data_ptr(), tensor.shape), set()).add(name)
    return {name: group - {name} for group in by_tensor.values() for name in group}


def load_strict(model: nn.Module, state: Mapping[str, torch.Tensor], source: Path) -> None:
    """Load `state` into `model`; ValueError naming the missing and unexpected keys unless they match.

    A tied weight saved once (safetensors stores shared tensors once) is not missing: loading the
    name that was saved fills every name of the tensor. Names a replacement declares renamed
    (`yamltrace.patch.RenamedState`) are read under its names.
    """
    state = with_renamed_state(model, state)
    expected = set(model.state_dict())
    aliases = _aliases(model)
    missing = sorted(k for k in expected - set(state) if not aliases.get(k, set()) & set(state))
    unexpected = sorted(set(state) - expected)
    if missing or unexpected:
        raise ValueError(
            f"Weights in {source} do not match {type(model).__name__}: missing keys {missing}, unexpected keys {unexpected}."
        )
    model.load_state_dict(state, strict=not (expected - set(state)))
