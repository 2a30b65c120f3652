"""Crash safety and `resume`: an interrupted run leaves whole shards only, and resuming it gives the
very files an uninterrupted run writes."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import torch
from helpers import ROOT

import yamltrace.extraction._writer as writer_module
from yamltrace.extraction import ExtractError, extract

TINY = ROOT / "specs" / "tiny.yaml"
SHARD = 30_000  # two batches of the fixture (about 19 kB each) per shard


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def crashing(batches: list, after: int) -> Iterator[dict]:
    for i, batch in enumerate(batches):
        if i == after:
            raise RuntimeError("simulated crash")
        yield batch


class Recorded(Sequence):
    """A sequence of batches that remembers which ones were built."""

    def __init__(self, batches: list) -> None:
        self.batches, self.built = batches, []

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i):
        self.built.append(i)
        return self.batches[i]


def test_resuming_after_a_crash_writes_the_same_files(model, batches, tmp_path: Path) -> None:
    extract(model, TINY, batches, tmp_path / "whole", shard_bytes=SHARD, progress=False)
    reference = files(tmp_path / "whole")
    assert len(reference) > 3

    crashed = tmp_path / "crashed"
    with pytest.raises(RuntimeError, match="simulated crash"):
        extract(model, TINY, crashing(batches, 5), crashed, shard_bytes=SHARD, progress=False)
    left = files(crashed)
    assert "index.json" not in left and not any(name.startswith(".") for name in left)
    assert left and all(reference[name] == data for name, data in left.items()), "finished shards are final"
    # A process killed while writing leaves its temporary file behind: resume removes it.
    (crashed / ".shard-r000-00009.safetensors.tmp").write_bytes(b"half a shard")

    source = Recorded(batches)
    extract(model, TINY, source, crashed, shard_bytes=SHARD, progress=False)
    assert files(crashed) == reference
    assert source.built == list(range(2 * len(left), len(batches))), "finished batches are not built again"


def test_resuming_a_finished_run_runs_nothing(model, batches, tmp_path: Path) -> None:
    extract(model, TINY, batches, tmp_path, shard_bytes=SHARD, progress=False)
    reference = files(tmp_path)
    source = Recorded(batches)
    acts = extract(model, TINY, source, tmp_path, shard_bytes=SHARD, progress=False)
    assert source.built == [] and files(tmp_path) == reference and len(acts) == 20


def test_without_resume_an_existing_extraction_is_an_error(model, batches, tmp_path: Path) -> None:
    extract(model, TINY, batches[:2], tmp_path, progress=False)
    with pytest.raises(ExtractError, match="already holds an extraction; pass resume=True"):
        extract(model, TINY, batches[:2], tmp_path, progress=False, resume=False)


def test_a_directory_of_another_run_is_an_error_before_anything_runs(model, batches, tmp_path: Path) -> None:
    extract(model, TINY, batches[:2], tmp_path, progress=False)
    reference = files(tmp_path)
    source = Recorded(batches[:2])
    with pytest.raises(
        ExtractError,
        match=r"holds shards of another run \(shard-r000-00000.safetensors\): its outputs "
        r"\(--outputs\) differs from this run's. Use an empty directory, or remove those shards.$",
    ):
        extract(model, TINY, source, tmp_path, outputs=["attentions"], progress=False)
    assert source.built == [] and files(tmp_path) == reference


def test_a_failing_writer_stops_the_run_with_its_error(model, batches, tmp_path: Path, monkeypatch) -> None:
    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writer_module, "write_safetensors", disk_full)
    with pytest.raises(
        ExtractError, match="writing activation shards to .* failed: No space left on device. The finished shards are kept"
    ):
        extract(model, TINY, batches, tmp_path, shard_bytes=SHARD, progress=False)
    assert not (tmp_path / "index.json").exists()


def test_memory_is_bounded_by_the_queue(model, tmp_path: Path) -> None:
    """While the writer is stuck, the model loop stops once `max_pending` shards are queued."""
    import threading

    release = threading.Event()
    real = writer_module.write_safetensors

    def slow(*args, **kwargs):
        release.wait(30)
        return real(*args, **kwargs)

    built: list[int] = []

    def batches():
        for i in range(12):
            built.append(i)
            yield {"input_ids": torch.zeros(1, 4, dtype=torch.long)}

    writer_module.write_safetensors = slow
    try:
        runner = threading.Thread(
            target=extract, args=(model, TINY, batches(), tmp_path), kwargs=dict(shard_bytes=1, progress=False, max_pending=2)
        )
        runner.start()
        for _ in range(300):
            if len(built) >= 4:
                break
            time.sleep(0.1)
        time.sleep(0.5)
        # (one batch per shard) one shard in the writer's hands, two queued, one waiting; no more is built
        assert len(built) == 4
    finally:
        release.set()
        writer_module.write_safetensors = real
        runner.join(30)
    assert len(built) == 12 and (tmp_path / "index.json").exists()
