"""Shared fixtures: the tiny model and its inputs."""

from __future__ import annotations

import pytest
import torch

from yamltrace.examples.tiny import TinyConfig, TinyModel


@pytest.fixture
def tiny() -> TinyModel:
    torch.manual_seed(0)
    return TinyModel(TinyConfig()).eval()


@pytest.fixture
def input_ids() -> torch.Tensor:
    generator = torch.Generator().manual_seed(1)
    return torch.randint(0, 128, (2, 7), generator=generator)
