"""Fixtures shared by the engine tests: a three-layer TinyModel and a batch of token ids for it."""

from __future__ import annotations

import pytest
import torch

from yamltrace.examples.tiny import TinyConfig, TinyModel


@pytest.fixture
def model() -> TinyModel:
    torch.manual_seed(0)
    return TinyModel(TinyConfig(num_hidden_layers=3)).eval()


@pytest.fixture
def ids() -> torch.Tensor:
    return torch.randint(0, 128, (1, 5), generator=torch.Generator().manual_seed(0))
