"""The output folder cannot be turned against the writer: planted links and FIFOs, a second writer, a
foreign index, an output path that is a file."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from helpers import ROOT

from yamltrace.errors import FolderError
from yamltrace.extraction import ExtractError, extract, open_activations

TINY = ROOT / "specs" / "tiny.yaml"


def test_a_planted_index_temporary_link_is_never_written_through(model, batches, tmp_path: Path) -> None:
    out, outside = tmp_path / "out", tmp_path / "outside.txt"
    out.mkdir()
    outside.write_text("precious")
    (out / ".index.json.tmp").symlink_to(outside)
    (out / ".shard-r000-00000.safetensors.tmp").symlink_to(outside)
    acts = extract(model, TINY, batches[:2], out, progress=False)
    assert outside.read_text() == "precious"
    assert (out / "index.json").is_file() and not (out / "index.json").is_symlink()
    assert len(acts) == 6 and json.loads((out / "index.json").read_text())["rows"] == 6


def test_a_planted_index_link_is_replaced_not_followed(model, batches, tmp_path: Path) -> None:
    out, outside = tmp_path / "out", tmp_path / "outside.txt"
    out.mkdir()
    outside.write_text("precious")
    (out / "index.json").symlink_to(outside)
    with pytest.raises(FolderError, match="symbolic link that leaves its folder"):
        extract(model, TINY, batches[:2], out, progress=False)
    assert outside.read_text() == "precious"


EXTRACT_INTO = """
import sys, torch
from yamltrace.examples.tiny import TinyConfig, TinyModel
from yamltrace.extraction import extract
model = TinyModel(TinyConfig()).eval()
try:
    extract(model, "specs/tiny.yaml", [{"input_ids": torch.zeros(2, 4, dtype=torch.long)}], sys.argv[1], progress=False)
except Exception as e:
    print(type(e).__name__, e)
"""


@pytest.mark.slow  # a FIFO
@pytest.mark.parametrize("kind", ["link", "fifo"])
def test_a_planted_lock_file_is_refused_not_followed(model, batches, tmp_path: Path, kind: str) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    out = tmp_path / "out"
    out.mkdir()
    if kind == "link":
        (out / ".extract-r000.lock").symlink_to(outside)
    else:
        os.mkfifo(out / ".extract-r000.lock")
    with pytest.raises(ExtractError, match="lock file"):
        extract(model, TINY, batches[:2], out, progress=False)
    assert outside.read_text() == "precious" and not (out / "index.json").exists()


@pytest.mark.slow  # a FIFO
@pytest.mark.parametrize("name", ["shard-r000-00000.safetensors", "shard-r001-00000.safetensors", "shard-r000-00007.safetensors"])
def test_a_fifo_named_like_a_shard_is_refused_at_once(tmp_path: Path, name: str) -> None:
    """In a subprocess: opening a FIFO blocks in safetensors' code, which holds the interpreter's lock."""
    os.mkfifo(tmp_path / name)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    try:
        result = subprocess.run(
            [sys.executable, "-c", EXTRACT_INTO, str(tmp_path)], capture_output=True, text=True, timeout=60, cwd=ROOT, env=env
        )
    except subprocess.TimeoutExpired:
        pytest.fail("extract blocked on a FIFO named like a shard")
    assert result.stdout.startswith(f"FolderError {tmp_path / name}: the "), result.stderr
    assert "is not a regular file (a FIFO)" in result.stdout
    assert not (tmp_path / "index.json").exists()


def test_a_second_writer_fails_at_once_naming_the_first(model, batches, tmp_path: Path) -> None:
    started, release = threading.Event(), threading.Event()

    def slow():
        for i, batch in enumerate(batches):
            if i == 1:
                started.set()
                release.wait(60)
            yield batch

    first = threading.Thread(target=extract, args=(model, TINY, slow(), tmp_path), kwargs={"progress": False})
    first.start()
    try:
        assert started.wait(60)
        other = [{"input_ids": torch.zeros(3, 6, dtype=torch.long)}]
        with pytest.raises(ExtractError) as caught:
            extract(model, TINY, other, tmp_path, progress=False)
        message = str(caught.value)
        assert (
            f"{tmp_path} is being written by another extract (pid {os.getpid()} on {socket.gethostname()!r}, started '" in message
        )
        assert "wait for it to finish, or use another output folder" in message
    finally:
        release.set()
        first.join(60)
    acts = open_activations(tmp_path)
    assert len(acts) == 20 and acts.index["batches"][0] == [0, 0, 3]
    assert not any(p.name.endswith(".lock") for p in tmp_path.iterdir()), "the lock file goes with its run"


def test_a_foreign_index_is_never_replaced(model, batches, tmp_path: Path) -> None:
    extract(model, TINY, batches[:2], tmp_path / "a", progress=False)
    out = tmp_path / "b"
    out.mkdir()
    foreign = (tmp_path / "a" / "index.json").read_bytes()
    (out / "index.json").write_bytes(foreign)
    with pytest.raises(
        ExtractError,
        match=r"index.json is the index of another run \(its outputs \(--outputs\) differs "
        r"from this run's\), or not an extraction's: extract does not replace it",
    ):
        extract(model, TINY, batches[:2], out, outputs=["attentions"], progress=False)
    assert (out / "index.json").read_bytes() == foreign and sorted(p.name for p in out.iterdir()) == ["index.json"]


def test_an_output_path_that_is_a_file_is_an_extract_error(model, batches, tmp_path: Path) -> None:
    (tmp_path / "out").write_text("a file")
    with pytest.raises(ExtractError, match="out: cannot use it as the output folder \\(a file\\)"):
        extract(model, TINY, batches[:2], tmp_path / "out", progress=False)
    with pytest.raises(ExtractError, match="cannot use it as the output folder"):
        extract(model, TINY, batches[:2], tmp_path / "out" / "below", progress=False)


def test_the_weights_can_be_part_of_the_fingerprint(model, batches, tmp_path: Path) -> None:
    extract(model, TINY, batches[:2], tmp_path, progress=False, fingerprint_weights=True)
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    with pytest.raises(ExtractError, match="holds shards of another run"):
        extract(model, TINY, batches[:2], tmp_path, progress=False, fingerprint_weights=True)
