"""Extraction across processes: torchrun with 2 ranks (gloo, CPU) stores the rows 1 process stores, in
the same order; a process killed mid-run leaves whole shards that a resume completes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import ROOT
from helpers_extract import TEXTS, tiny_tokenizer

from yamltrace.cli import main
from yamltrace.examples.tiny import TinyConfig
from yamltrace.extraction import open_activations

pytestmark = pytest.mark.slow
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


@pytest.fixture
def argv(tmp_path: Path) -> list[str]:
    TinyConfig().save(tmp_path / "config.json")
    rows = [f"{text} number {i}" for i, text in enumerate(TEXTS * 3)]  # 21 rows: 6 batches of 4, the last of 1
    (tmp_path / "data.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in rows), encoding="utf-8")
    tiny_tokenizer(tmp_path / "tok", rows)
    return [
        "extract", "--model", "yamltrace.examples.tiny:TinyModel", "--config", str(tmp_path / "config.json"),
        "--spec", str(ROOT / "specs" / "tiny.yaml"), "--data", str(tmp_path / "data.jsonl"), "--tokenizer",
        str(tmp_path / "tok"), "--max-length", "8", "--batch-size", "4", "--shard-mb", "1", "--quiet",
    ]  # fmt: skip


def test_two_processes_store_the_rows_of_one(argv: list[str], tmp_path: Path) -> None:
    assert main([*argv, "--out", str(tmp_path / "one")]) == 0
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "yamltrace"]
    result = subprocess.run(
        [*torchrun, *argv, "--out", str(tmp_path / "two")], capture_output=True, text=True, timeout=120, cwd=ROOT, env=ENV
    )
    assert result.returncode == 0, result.stdout + result.stderr
    one, two = open_activations(tmp_path / "one"), open_activations(tmp_path / "two")
    assert [s["file"] for s in two.index["shards"]] == ["shard-r000-00000.safetensors", "shard-r001-00000.safetensors"]
    assert two.index["batches"] == [[0, 0, 4], [1, 0, 4], [0, 4, 4], [1, 4, 4], [0, 8, 4], [1, 8, 1]]
    assert two.index["run"]["world_size"] == 2 and len(one) == len(two) == 21
    assert one.keys() == two.keys()
    for key in one:
        assert torch.equal(one.get(key), two.get(key)), key


CRASHING = """
import os, sys, torch
from yamltrace.examples.tiny import TinyConfig, TinyModel
from yamltrace.extraction import extract
torch.manual_seed(0)
model = TinyModel(TinyConfig()).eval()
def batches():
    for i in range(9):
        if i == 6:
            os._exit(3)  # no cleanup at all, as a killed process
        yield {"input_ids": torch.arange(8 * i, 8 * i + 16).reshape(2, 8) % 128}
extract(model, "specs/tiny.yaml", batches(), sys.argv[1], shard_bytes=30_000, progress=False)
"""


def test_a_killed_process_leaves_whole_shards_and_resume_finishes_the_run(tmp_path: Path) -> None:
    from yamltrace.examples.tiny import TinyModel
    from yamltrace.extraction import extract

    command = [sys.executable, "-c", CRASHING, str(tmp_path / "resumed")]
    assert subprocess.run(command, capture_output=True, timeout=120, cwd=ROOT, env=ENV).returncode == 3
    left = sorted(p.name for p in (tmp_path / "resumed").iterdir() if not p.name.startswith("."))
    assert left and "index.json" not in left

    torch.manual_seed(0)
    model = TinyModel(TinyConfig()).eval()
    batches = [{"input_ids": torch.arange(8 * i, 8 * i + 16).reshape(2, 8) % 128} for i in range(9)]
    spec = ROOT / "specs" / "tiny.yaml"
    extract(model, spec, batches, tmp_path / "whole", shard_bytes=30_000, progress=False)
    extract(model, spec, batches, tmp_path / "resumed", shard_bytes=30_000, progress=False)
    files = {p.name: p.read_bytes() for p in (tmp_path / "whole").iterdir()}
    assert set(left) < set(files)
    assert {p.name: p.read_bytes() for p in (tmp_path / "resumed").iterdir()} == files
