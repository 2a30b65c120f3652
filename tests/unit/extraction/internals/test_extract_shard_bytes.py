"""A shard holds every tensor's bytes exactly, whatever its dtype or memory layout: the writer's
direct path (contiguous tensors of numpy's dtypes) and its byte-view path read back the same, and so
do a batch's small tensors, which the writer joins into chunks as they fill."""

from __future__ import annotations

import weakref
from pathlib import Path

import torch
from safetensors.torch import load_file

from yamltrace.extraction import _writer
from yamltrace.extraction._writer import ShardWriter, write_safetensors


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
        write_safetensors(f, {name: [piece[name] for piece in pieces] for name in pieces[0]}, {"run": "x"})
    read = load_file(path)
    assert sorted(read) == sorted(pieces[0])
    for name in pieces[0]:
        expected = torch.cat([piece[name] for piece in pieces])
        assert read[name].dtype == expected.dtype and torch.equal(read[name], expected), name


def _written(tmp_path: Path, pieces: list[dict[str, torch.Tensor]], shard_bytes: int = 2**30) -> dict[str, torch.Tensor]:
    """`pieces` (one per batch) through a `ShardWriter`, read back as one tensor per name."""
    writer = ShardWriter(tmp_path, rank=0, first_seq=0, shard_bytes=shard_bytes, run="x")
    for index, piece in enumerate(pieces):
        writer.put(index, next(iter(piece.values())).shape[0], piece)
    shards = [load_file(path) for path in writer.close()]
    return {name: torch.cat([shard[name] for shard in shards]) for name in pieces[0]}


def test_every_dtype_and_layout_reads_back_through_the_writer_in_chunks_or_whole(tmp_path: Path, monkeypatch) -> None:
    # Tensors under 200 bytes are joined into chunks of 200 bytes or more a name; larger ones are written as they are.
    monkeypatch.setattr(_writer, "_SMALL", 200)
    monkeypatch.setattr(_writer, "_CHUNK_BYTES", 100 * 9)
    torch.manual_seed(0)
    pieces = []
    for rows in (2, 3, 0, 1, 9, 2, 2, 5):
        wide = torch.randn(5, rows, 4)
        pieces.append({
            "f32": torch.randn(rows, 4, 3),  # 48 bytes a row: small up to 4 rows
            "transposed": wide.transpose(0, 1),
            "bf16": torch.randn(rows, 6).to(torch.bfloat16),
            "bool": torch.rand(rows, 3) > 0.5,
            "i64": torch.randint(-9, 9, (rows, 2)),
        })  # fmt: skip
    read = _written(tmp_path, pieces)
    for name in pieces[0]:
        expected = torch.cat([piece[name] for piece in pieces])
        assert read[name].dtype == expected.dtype and torch.equal(read[name], expected), name


def test_rows_spread_over_several_shards_read_back_in_order(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(_writer, "_SMALL", 200)
    monkeypatch.setattr(_writer, "_CHUNK_BYTES", 64)
    torch.manual_seed(1)
    pieces = [{"x": torch.randn(rows, 4), "y": torch.arange(rows * 2).reshape(rows, 2)} for rows in (3, 1, 4, 2, 6, 1)]
    read = _written(tmp_path, pieces, shard_bytes=150)
    assert len(list(tmp_path.glob("*.safetensors"))) > 1
    for name in ("x", "y"):
        assert torch.equal(read[name], torch.cat([piece[name] for piece in pieces])), name


def test_small_tensors_are_freed_once_their_chunk_is_joined_not_kept_until_the_shard_is_written(
    tmp_path: Path, monkeypatch
) -> None:
    # Two names in a chunk of 2048 bytes: 1024 bytes each, so 16 batches of a 64-byte "small" tensor.
    monkeypatch.setattr(_writer, "_SMALL", 1024)
    monkeypatch.setattr(_writer, "_CHUNK_BYTES", 2048)
    writer = ShardWriter(tmp_path, rank=0, first_seq=0, shard_bytes=2**30, run="x")
    torch.manual_seed(3)
    smalls, larges = [torch.randn(2, 8) for _ in range(17)], [torch.randn(2, 1024) for _ in range(17)]
    expected = {"small": torch.cat(smalls), "large": torch.cat(larges)}
    kept_small, kept_large = [weakref.ref(t) for t in smalls], [weakref.ref(t) for t in larges]
    for index in range(17):
        writer.put(index, 2, {"small": smalls.pop(0), "large": larges.pop(0)})
    assert [ref() is None for ref in kept_small] == [True] * 16 + [False], "a full chunk is joined and its tensors freed"
    assert all(ref() is not None for ref in kept_large), "a large tensor is written from its own memory"
    (path,) = writer.close()
    read = load_file(path)
    assert all(torch.equal(read[name], expected[name]) for name in expected)


def test_a_small_view_waits_as_a_copy_so_later_writes_into_what_it_views_are_not_stored(tmp_path: Path) -> None:
    # A batch's small tensor that is a slice of a larger one (a buffer the next forward fills again)
    # is stored with the values it had when it was added, and does not keep the larger one's memory.
    writer = ShardWriter(tmp_path, rank=0, first_seq=0, shard_bytes=2**30, run="x")
    buffer = torch.arange(400.0).reshape(100, 4)
    first, second = buffer[:2], buffer[2:4]
    expected = torch.cat([first, second]).clone()
    writer.put(0, 2, {"x": first})
    writer.put(1, 2, {"x": second})
    buffer.fill_(-1.0)
    (path,) = writer.close()
    assert torch.equal(load_file(path)["x"], expected)


def test_chunks_are_on_the_cpu_whatever_the_default_device(tmp_path: Path, monkeypatch) -> None:
    # A chunk of 40 bytes: the second 32-byte tensor fills it, so the two are joined inside the block.
    monkeypatch.setattr(_writer, "_SMALL", 40)
    monkeypatch.setattr(_writer, "_CHUNK_BYTES", 40)
    writer = ShardWriter(tmp_path, rank=0, first_seq=0, shard_bytes=2**30, run="x")
    smalls = [torch.randn(2, 4), torch.randn(2, 4)]
    with torch.device("meta"):  # a model built under a default device does not move the shard
        for index, small in enumerate(smalls):
            writer.put(index, 2, {"x": small})
    (path,) = writer.close()
    assert torch.equal(load_file(path)["x"], torch.cat(smalls))
