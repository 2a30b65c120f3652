"""Shared fixtures: the tiny model and its inputs; every test starts and ends with an empty patch registry."""

from __future__ import annotations

import pytest
import torch

from yamltrace.examples.tiny import TinyConfig, TinyModel
from yamltrace.patch import clear_patch_mapping, get_patch_mapping


@pytest.fixture(autouse=True)
def empty_patch_registry():
    """The process-wide patch registry is empty before each test and emptied after it."""
    assert get_patch_mapping() == {}, "a previous test leaked patch mappings"
    yield
    clear_patch_mapping()


@pytest.fixture
def tiny() -> TinyModel:
    torch.manual_seed(0)
    return TinyModel(TinyConfig()).eval()


@pytest.fixture
def input_ids() -> torch.Tensor:
    generator = torch.Generator().manual_seed(1)
    return torch.randint(0, 128, (2, 7), generator=generator)
