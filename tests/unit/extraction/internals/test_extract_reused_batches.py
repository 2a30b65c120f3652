"""A batch's tensors are the caller's: an input loop may fill the same tensors again for the next
batch. What `extract` stores of them (kept model inputs, carried columns) is what they held when
their batch ran, whether the writer copies them into a chunk (small) or keeps them until the shard
is written (large)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from helpers import ROOT

from yamltrace.extraction import _writer, extract

TINY = ROOT / "specs" / "tiny.yaml"


@pytest.mark.parametrize("size", ["small", "large"])
def test_inputs_and_columns_filled_again_for_each_batch_are_stored_as_each_batch_had_them(
    model, batches, tmp_path: Path, monkeypatch, size: str
) -> None:
    if size == "large":  # every tensor is kept as it is until its shard is written
        monkeypatch.setattr(_writer, "_SMALL", 1)
    full = [b for b in batches if b["input_ids"].shape[0] == 3]
    labels = [torch.arange(3) + 10 * i for i in range(len(full))]
    reused = {"input_ids": torch.zeros(3, 6, dtype=torch.long), "attention_mask": torch.zeros(3, 6, dtype=torch.long)}
    reused_labels = torch.zeros(3, dtype=torch.long)

    def loop() -> Iterator[dict[str, torch.Tensor]]:
        for batch, label in zip(full, labels):
            for name, tensor in reused.items():
                tensor.copy_(batch[name])
            reused_labels.copy_(label)
            yield {**reused, "labels": reused_labels}

    acts = extract(model, TINY, loop(), tmp_path, columns=["labels"], progress=False)
    for name in reused:
        assert torch.equal(acts.get(name), torch.cat([b[name] for b in full])), name
    assert torch.equal(acts.column("labels"), torch.cat(labels))
