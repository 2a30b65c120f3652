"""A shard holds every tensor's bytes exactly, whatever its dtype or memory layout: the writer's
direct path (contiguous tensors of numpy's dtypes) and its byte-view path read back the same."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file

from yamltrace.extraction._writer import write_safetensors


def _pieces() -> list[dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    pieces = []
    for rows in (2, 3):
        wide = torch.randn(5, rows, 4)
        pieces.append({
            "f32": torch.randn(rows, 4, 3),
            "transposed": wide.transpose(0, 1),  # not contiguous
            "sliced": torch.randn(rows, 8)[:, ::2],  # strided
            "offset": torch.randn(rows + 1, 3)[1:],  # contiguous, storage offset past 0
            "bf16": torch.randn(rows, 6).to(torch.bfloat16),
            "f16": torch.randn(rows, 6).to(torch.float16),
            "i64": torch.randint(-9, 9, (rows, 2)),
            "bool": torch.rand(rows, 3) > 0.5,
            "u8": torch.randint(0, 255, (rows,), dtype=torch.uint8),
        })  # fmt: skip
    return pieces


def test_every_dtype_and_layout_reads_back_as_written(tmp_path: Path) -> None:
    pieces = _pieces()
    path = tmp_path / "shard.safetensors"
    with path.open("wb", buffering=2**20) as f:
        write_safetensors(f, pieces, {"run": "x"})
    read = load_file(path)
    assert sorted(read) == sorted(pieces[0])
    for name in pieces[0]:
        expected = torch.cat([piece[name] for piece in pieces])
        assert read[name].dtype == expected.dtype and torch.equal(read[name], expected), name
