"""Fixtures of the spec tests: a spec folder with a tensor file for interventions to read."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    spec_folder = tmp_path / "spec"
    spec_folder.mkdir()
    save_file({"honesty": torch.arange(4.0), "count": torch.arange(4)}, str(spec_folder / "steer.safetensors"))
    return spec_folder
