"""Crash safety and `resume`: an interrupted run leaves whole shards only, and resuming it gives the
very files an uninterrupted run writes."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from helpers import ROOT

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
