"""Helpers of the load cache's tests: one-recorder spec files and steered specs, written anew with or
without their modification time."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from safetensors.torch import save_file

from yamltrace.spec import Spec


TINY = "yamltrace: 1\nimports: [yamltrace.examples.tiny]\noutputs:\n  hidden_states: {target}\n"


def write(path: Path, target: str = "TinyDecoderLayer", *, keep_mtime: bool = False) -> Path:
    """Write a one-recorder spec; with `keep_mtime`, give the file its previous modification time back."""
    before = path.stat() if keep_mtime else None
    path.write_text(TINY.format(target=target), encoding="utf-8")
    if before is not None:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    return path


def target(spec: Spec, key: str = "hidden_states") -> type | None:
    return spec.outputs[key][0].target_class


STEER = """\
yamltrace: 1
imports: [yamltrace.examples.tiny]
interventions:
  steer: {target: TinyDecoderLayer, layers: [1], add: {tensor: "steer.safetensors:v"}}
  scale: {target: TinyDecoderLayer, layers: [2], scale: 0.5}
"""


def keep_mtime(path: Path, write) -> None:
    """`write()` the file anew, then give it its previous modification time back."""
    before = path.stat()
    write()
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def steered(tmp_path: Path, vector: torch.Tensor, **more: torch.Tensor) -> Path:
    save_file({"v": vector, **more}, str(tmp_path / "steer.safetensors"))
    path = tmp_path / "steer.yaml"
    path.write_text(STEER, encoding="utf-8")
    return path


def value(spec: Spec) -> torch.Tensor:
    return spec.interventions[0].value
