"""Extraction across processes: torchrun with 2 ranks (gloo, CPU) stores the rows 1 process stores, in
the same order; a process killed or interrupted mid-run leaves whole shards that a resume completes;
a full disk is one line."""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
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


SLOW = """
import sys, time
import yamltrace.examples.tiny as tiny
forward = tiny.TinyModel.forward
def slow(self, *args, **kwargs):
    time.sleep(0.05)  # a model slow enough to be interrupted mid-run
    return forward(self, *args, **kwargs)
tiny.TinyModel.forward = slow
from yamltrace.cli import main
sys.exit(main(sys.argv[1:]))
"""


def interrupted(command: list[str], out: Path, sent: signal.Signals) -> subprocess.CompletedProcess[str]:
    """Run `command`, send `sent` once it has written two shards; what it printed, bounded in time."""

    def interruptible() -> None:  # a shell's background job inherits SIGINT ignored; Ctrl-C reaches a terminal's job
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=ENV, preexec_fn=interruptible
    )
    try:
        deadline = time.monotonic() + 120
        while len(list(out.glob("shard-*.safetensors"))) < 2:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"no two shards to interrupt: {process.communicate()}")
            time.sleep(0.05)
        process.send_signal(sent)
        stdout, stderr = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        pytest.fail(f"extract did not stop within 60 s of {sent.name}")
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


@pytest.mark.parametrize(("sent", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["int", "term"])
def test_an_interrupt_stops_at_once_with_one_line_and_whole_shards(argv, tmp_path: Path, sent, status) -> None:
    rows = [f"{text} number {i}" for i, text in enumerate(TEXTS * 60)]  # 420 rows: 105 batches, 4 shards
    (tmp_path / "data.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in rows), encoding="utf-8")
    out = tmp_path / "out"
    result = interrupted([sys.executable, "-c", SLOW, *argv, "--out", str(out)], out, sent)
    assert result.returncode == status, result.stderr
    (line,) = result.stderr.splitlines()
    said = re.fullmatch(
        rf"yamltrace extract: interrupted: (\d+) batch\(es\) are safe in finished shards in {re.escape(str(out))}; "
        r"run the same command again to resume after them\.",
        line,
    )
    assert said, line
    names = sorted(p.name for p in out.iterdir())
    assert all(re.fullmatch(r"shard-r000-\d{5}\.safetensors", name) for name in names), names  # no temporary, lock or index
    left = {name: (out / name).read_bytes() for name in names}

    assert main([*argv, "--out", str(out)]) == 0
    assert main([*argv, "--out", str(tmp_path / "whole")]) == 0
    assert {p.name: p.read_bytes() for p in out.iterdir()} == {p.name: p.read_bytes() for p in (tmp_path / "whole").iterdir()}
    assert all((out / name).read_bytes() == data for name, data in left.items()), "the finished shards are kept as they were"
    index = open_activations(out).index  # built from each shard's own record of its batches
    shards = [shard["file"] for shard in index["shards"]]
    assert sum(shards[shard] in left for shard, _, _ in index["batches"]) == int(said[1]) >= 2


def test_a_full_disk_is_one_line(argv, tmp_path: Path) -> None:
    def small_files() -> None:  # writes past 100 kB fail with EFBIG (Python ignores SIGXFSZ)
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))

    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "-m", "yamltrace", *argv, "--out", str(out)],
        capture_output=True, text=True, timeout=120, cwd=ROOT, env=ENV, preexec_fn=small_files,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"yamltrace extract: error: writing activation shards to {out} failed: File too large. ")
    assert sorted(p.name for p in out.iterdir()) == [], "no temporary, no lock, no index left"
