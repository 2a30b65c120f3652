"""`extract` with `positions: last`: each stored row is that row's last real token (right padding);
a literal position that falls on padding warns once per run, not once per batch."""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from yamltrace import OutputRecorder
from yamltrace.examples.tiny import TinyDecoderLayer
from yamltrace.extraction import extract


def right_padded(batches: list[dict[str, torch.Tensor]]) -> list[dict[str, torch.Tensor]]:
    """The batches with row i of each keeping 6 - 2 * (i % 3) real tokens, padded on the right."""
    padded = []
    for batch in batches:
        mask = torch.ones_like(batch["attention_mask"])
        for row in range(mask.shape[0]):
            mask[row, mask.shape[1] - 2 * (row % 3) :] = 0
        padded.append({"input_ids": batch["input_ids"] * mask, "attention_mask": mask})
    return padded


def test_last_stores_each_rows_last_real_token(model, batches, tmp_path: Path) -> None:
    batches = right_padded(batches)
    full = extract(model, {"h": OutputRecorder(TinyDecoderLayer, index=0)}, batches, tmp_path / "full", progress=False)
    last = extract(
        model, {"h": OutputRecorder(TinyDecoderLayer, index=0, positions="last")}, batches, tmp_path / "last", progress=False
    )
    mask = last.get("attention_mask")
    ends = mask.sum(1) - 1
    for layer in full.layers("h"):
        whole = full.get("h", layer)
        expected = whole[torch.arange(len(ends)), ends][:, None]
        assert last.shape("h") == (len(ends), 1, whole.shape[-1])
        assert torch.equal(last.get("h", layer), expected)


def test_a_literal_position_on_padding_warns_once_per_run(model, batches, tmp_path: Path) -> None:
    spec = {"h": OutputRecorder(TinyDecoderLayer, index=0, positions=[-1])}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        extract(model, spec, right_padded(batches), tmp_path, progress=False)
    messages = [str(w.message) for w in caught if "padding" in str(w.message)]
    assert len(messages) == 1 and "positions: last" in messages[0]
