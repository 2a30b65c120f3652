"""`open_activations` on a folder from elsewhere: nothing read outside it, nothing that blocks, every
tampered index or shard a located yamltrace error, and what the index says is what is read."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from helpers_folder import bounded
from safetensors.torch import load_file, save_file

from yamltrace import OutputRecorder
from yamltrace.errors import FolderError, YamltraceError
from yamltrace.examples.tiny import TinyConfig, TinyDecoderLayer, TinyModel
from yamltrace.extraction import extract, open_activations

SPEC = {"hidden_states": OutputRecorder(TinyDecoderLayer, index=0, layers=(0, 1))}
# The caps docs/security.md gives: an activations index.json, and one safetensors header (of a shard).
MAX_INDEX_BYTES = 64 * 2**20
MAX_HEADER_BYTES = 64 * 2**20


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """One extraction of 12 rows in 4 batches, over several shards (written once, copied per test)."""
    torch.manual_seed(0)
    model = TinyModel(TinyConfig()).eval()
    generator = torch.Generator().manual_seed(1)
    batches = [{"input_ids": torch.randint(0, 128, (3, 5), generator=generator)} for _ in range(4)]
    directory = tmp_path_factory.mktemp("finished") / "acts"
    extract(model, SPEC, batches, directory, shard_bytes=4_000, progress=False, inputs=("input_ids",))
    return directory


@pytest.fixture
def acts_dir(finished: Path, tmp_path: Path) -> Path:
    directory = tmp_path / "acts"
    shutil.copytree(finished, directory)
    return directory


def _index(directory: Path) -> dict:
    return json.loads((directory / "index.json").read_text())


def _write_index(directory: Path, index: dict) -> None:
    (directory / "index.json").write_text(json.dumps(index))


def _read_everything(directory: Path) -> None:
    acts = open_activations(directory)
    for key in acts.keys():
        acts.dtype(key), acts.shape(key), acts.get(key)


READ_ALL = """
from yamltrace.extraction import open_activations
acts = open_activations(sys.argv[1])
for key in acts.keys():
    acts.get(key)
"""


def test_a_finished_extraction_still_reads(acts_dir: Path) -> None:
    acts = open_activations(acts_dir)
    assert len(acts) == 12 and len(acts.index["shards"]) > 1
    assert acts.get("hidden_states", 1).shape == (12, 5, 32)


@pytest.mark.parametrize("where", ["../outside/secret.safetensors", "ABSOLUTE"])
def test_an_index_entry_naming_a_file_outside_is_refused(acts_dir: Path, tmp_path: Path, where: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(acts_dir / _index(acts_dir)["shards"][0]["file"], outside / "secret.safetensors")
    index = _index(acts_dir)
    index["shards"][1]["file"] = str(outside / "secret.safetensors") if where == "ABSOLUTE" else where
    _write_index(acts_dir, index)
    with pytest.raises(FolderError, match=r"index\.json: \$\.shards\[1\]\.file .* is not a bare file name"):
        _read_everything(acts_dir)


def test_a_shard_that_links_out_of_the_folder_is_refused(acts_dir: Path, tmp_path: Path) -> None:
    name = _index(acts_dir)["shards"][0]["file"]
    (acts_dir / name).rename(tmp_path / "elsewhere.safetensors")
    os.symlink(tmp_path / "elsewhere.safetensors", acts_dir / name)
    with pytest.raises(FolderError, match=rf"{name}: the activation shard is a symbolic link that leaves its folder"):
        _read_everything(acts_dir)


@pytest.mark.slow  # a FIFO
def test_a_fifo_shard_is_refused_without_blocking(acts_dir: Path) -> None:
    name = _index(acts_dir)["shards"][0]["file"]
    (acts_dir / name).unlink()
    os.mkfifo(acts_dir / name)
    assert bounded(READ_ALL, str(acts_dir)).startswith(
        f"FolderError: {acts_dir / name}: the activation shard is not a regular file (a FIFO)"
    )


@pytest.mark.slow  # a FIFO
def test_an_index_entry_naming_a_fifo_and_a_fifo_index_are_refused_without_blocking(acts_dir: Path) -> None:
    os.mkfifo(acts_dir / "pipe.safetensors")
    index = _index(acts_dir)
    index["shards"][0]["file"] = "pipe.safetensors"
    _write_index(acts_dir, index)
    assert bounded(READ_ALL, str(acts_dir)).startswith(
        f"FolderError: {acts_dir}/pipe.safetensors: the activation shard is not a regular"
    )
    (acts_dir / "index.json").unlink()
    os.mkfifo(acts_dir / "index.json")
    assert bounded(READ_ALL, str(acts_dir)).startswith(
        f"FolderError: {acts_dir}/index.json: the activation index is not a regular"
    )


def _drop_keys(index: dict) -> None:
    del index["keys"]


def _string_batch(index: dict) -> None:
    index["batches"][0][2] = "3"


def _shard_as_text(index: dict) -> None:
    index["shards"][0] = "shard.safetensors"


def _keys_as_list(index: dict) -> None:
    index["keys"] = ["hidden_states"]


def _unknown_dtype(index: dict) -> None:
    index["keys"]["hidden_states"]["dtype"] = "X99"


def _negative_shard(index: dict) -> None:
    index["batches"][0][0] = -1


def _rows_past_the_shard(index: dict) -> None:
    index["batches"][0][2] = 99


def _short_batch(index: dict) -> None:
    index["batches"][0] = [0, 0]


def _layer_as_text(index: dict) -> None:
    index["keys"]["hidden_states"]["layers"] = ["0"]


def _wrong_total(index: dict) -> None:
    index["rows"] = 13


def _huge_row_shape(index: dict) -> None:
    index["keys"]["hidden_states"]["row_shape"] = [2**40, 2**40]


TAMPERED = {
    _drop_keys: r"\$\.keys: expected an object",
    _string_batch: r"\$\.batches\[0\]\[2\]: expected a non-negative integer, got '3'",
    _shard_as_text: r"\$\.shards\[0\]: expected an object",
    _keys_as_list: r"\$\.keys: expected an object, got list",
    _unknown_dtype: r"\$\.keys\['hidden_states'\]\.dtype: expected one of F64",
    _negative_shard: r"\$\.batches\[0\]\[0\]: expected a non-negative integer, got -1",
    _rows_past_the_shard: r"\$\.batches\[0\]: rows 0\.\.99 lie past the \d+ rows of shard 0",
    _short_batch: r"\$\.batches\[0\]: expected \[shard, offset, rows\]",
    _layer_as_text: r"\$\.keys\['hidden_states'\]\.layers\[0\]: expected a layer number",
    _wrong_total: r"\$\.rows: 13 rows, but the batches hold 12",
    _huge_row_shape: r"\$\.keys\['hidden_states'\]\.row_shape: 12 row\(s\) of shape \[1099511627776, 1099511627776\] F32 "
    r"are 5\.8e\+25 bytes, more than a tensor can hold",
}


@pytest.mark.parametrize("tamper", list(TAMPERED), ids=lambda f: f.__name__.strip("_"))
def test_a_tampered_index_is_a_located_error_when_opened(acts_dir: Path, tamper) -> None:
    index = _index(acts_dir)
    tamper(index)
    _write_index(acts_dir, index)
    with pytest.raises(YamltraceError, match=r"index\.json: " + TAMPERED[tamper]):
        open_activations(acts_dir)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b'{"format": "yamltrace-activations", "keys": \xff}', r"not UTF-8 text \(byte 44\)"),
        (b'{"format": "yamltrace-activations", "keys": {', r"index\.json:1:46: the activation index is not valid JSON"),
        (b"[" * 100_000 + b"]" * 100_000, r"nests deeper than 64 levels"),
    ],
    ids=["utf8", "json", "deep"],
)
def test_an_index_that_is_not_json_is_a_located_error(acts_dir: Path, text: bytes, message: str) -> None:
    (acts_dir / "index.json").write_bytes(text)
    with pytest.raises(FolderError, match=message):
        open_activations(acts_dir)


def test_an_index_over_its_cap_is_refused_before_it_is_read(acts_dir: Path) -> None:
    with open(acts_dir / "index.json", "r+b") as f:
        f.truncate(MAX_INDEX_BYTES + 1)  # sparse: costs no disk
    with pytest.raises(FolderError, match=rf"over the {MAX_INDEX_BYTES:,}-byte limit"):
        open_activations(acts_dir)


def _first_shard(directory: Path) -> Path:
    return directory / _index(directory)["shards"][0]["file"]


def test_a_shard_header_over_its_cap_or_past_the_file_is_refused(acts_dir: Path) -> None:
    shard = _first_shard(acts_dir)
    with open(shard, "r+b") as f:
        f.write((MAX_HEADER_BYTES + 1).to_bytes(8, "little"))
        f.truncate(MAX_HEADER_BYTES + 100)
    with pytest.raises(FolderError, match=r"activation shard's header is [\d,]+ bytes, over the"):
        _read_everything(acts_dir)
    shard.write_bytes((2**40).to_bytes(8, "little") + b"{}")
    with pytest.raises(FolderError, match="cut short or not a safetensors file"):
        _read_everything(acts_dir)
    shard.write_bytes(b"\x02" + b"\x00" * 7 + b"[]")
    with pytest.raises(FolderError, match="header is not a safetensors header"):
        _read_everything(acts_dir)


def test_a_shard_with_damaged_data_is_an_extract_error(acts_dir: Path) -> None:
    shard = _first_shard(acts_dir)
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) - 64])  # header intact, last tensor cut
    with pytest.raises(YamltraceError, match=shard.name):
        _read_everything(acts_dir)


def _rewrite_shard(shard: Path, change) -> None:
    from safetensors import safe_open

    with safe_open(str(shard), framework="pt") as f:
        metadata = f.metadata()
    tensors = load_file(str(shard))
    save_file({name: change(tensor) for name, tensor in tensors.items()}, str(shard), metadata=metadata)


def test_a_short_shard_is_refused_instead_of_returning_fewer_rows(acts_dir: Path) -> None:
    shard = _first_shard(acts_dir)
    _rewrite_shard(shard, lambda tensor: tensor[:-1].clone())
    with pytest.raises(
        YamltraceError,
        match=rf"{shard.name}: tensor 'hidden_states/0' is 'F32' of shape \[\d+, 5, 32\], but .*index\.json says F32 of shape",
    ):
        open_activations(acts_dir).get("hidden_states", 0)


def test_a_shard_of_another_dtype_than_the_index_says_is_refused(acts_dir: Path) -> None:
    index = _index(acts_dir)
    index["keys"]["hidden_states"]["dtype"] = "I8"
    _write_index(acts_dir, index)
    acts = open_activations(acts_dir)
    assert acts.dtype("hidden_states") == torch.int8
    with pytest.raises(YamltraceError, match=r"tensor 'hidden_states/0' is 'F32' .* says I8"):
        acts.get("hidden_states", 0)


def test_a_shard_missing_a_listed_layer_is_refused(acts_dir: Path) -> None:
    index = _index(acts_dir)
    index["keys"]["hidden_states"]["layers"] = [0, 1, 2]
    _write_index(acts_dir, index)
    with pytest.raises(YamltraceError, match=r"holds no tensor 'hidden_states/2'"):
        open_activations(acts_dir).get("hidden_states", 2)
