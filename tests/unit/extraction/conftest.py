"""Fixtures of the extraction tests: one torch thread, the tiny model, padded batches of token ids, the
files of a `yamltrace extract` command."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers_extract import cli_inputs

from yamltrace.examples.tiny import TinyConfig, TinyModel


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def model() -> TinyModel:
    torch.manual_seed(0)
    return TinyModel(TinyConfig()).eval()


@pytest.fixture
def batches() -> list[dict[str, torch.Tensor]]:
    """Seven batches of 3 rows (the last of 2), sequence 6, with an attention mask."""
    generator = torch.Generator().manual_seed(1)
    out = []
    for rows in (3, 3, 3, 3, 3, 3, 2):
        ids = torch.randint(0, 128, (rows, 6), generator=generator)
        out.append({"input_ids": ids, "attention_mask": torch.ones_like(ids)})
    return out


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    """The files of a `yamltrace extract` command (`helpers_extract.cli_inputs`)."""
    return cli_inputs(tmp_path)
