"""The writer thread of `extract`, made to fail or to stall by patching its shard writer: a failing write
stops the run with its error and no index, and while the writer is stuck the model loop stops once
`max_pending` shards are queued (memory bounded by the queue)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
from helpers import ROOT

import yamltrace.extraction._writer as writer_module
from yamltrace.extraction import ExtractError, extract

TINY = ROOT / "specs" / "tiny.yaml"
SHARD = 30_000  # two batches of the fixture (about 19 kB each) per shard


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
