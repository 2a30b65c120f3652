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


class _Writes:
    """A binary file that keeps each write's size (and the bytes, to read back)."""

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.data = bytearray()

    def write(self, buffer: object) -> int:
        data = bytes(memoryview(buffer).cast("B"))  # type: ignore[arg-type]
        self.sizes.append(len(data))
        self.data += data
        return len(data)

    def flush(self) -> None:
        pass

    def fileno(self) -> int:
        return -1


def test_a_tensors_small_pieces_are_joined_into_bounded_writes(tmp_path: Path, monkeypatch) -> None:
    from yamltrace.extraction import _writer

    monkeypatch.setattr(_writer, "_GATHER_BYTES", 100)
    monkeypatch.setattr(_writer, "_FILE_BUFFER", 150)
    monkeypatch.setattr(_writer.os, "fsync", lambda fd: None)
    torch.manual_seed(0)
    # float32 rows of 5 values (20 bytes): pieces of 1, 2, 1, 8 (160 bytes, over the file buffer: alone),
    # 2, 3, 4 rows; y keeps 3 columns (12 bytes a row, 96 for 8 rows: under the buffer).
    pieces = [{"x": torch.randn(rows, 5), "y": torch.randn(rows, 5)[:, ::2]} for rows in (1, 2, 1, 8, 2, 3, 4)]
    f = _Writes()
    write_safetensors(f, pieces, {"run": "x"})  # type: ignore[arg-type]
    data_writes = f.sizes[2:]  # after the header's length and the header
    # x: 20+40+20 | 160 | 40+60 | 80;  y: 12+24+12 | 96 | 24+36 | 48
    assert data_writes == [80, 160, 100, 80, 48, 96, 60, 48]
    path = tmp_path / "shard.safetensors"
    path.write_bytes(bytes(f.data))
    read = load_file(path)
    for name in ("x", "y"):
        assert torch.equal(read[name], torch.cat([piece[name] for piece in pieces])), name
