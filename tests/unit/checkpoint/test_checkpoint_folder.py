"""A checkpoint folder from elsewhere: every file it holds is read under the folder rule (regular files
inside the folder, JSON and headers capped), so a FIFO fails instead of hanging and a link out is refused."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
import torch
from helpers_folder import bounded
from safetensors.torch import save_file

from yamltrace.checkpoint import SPEC_FILE, from_pretrained, save_pretrained
from yamltrace.errors import FolderError, SpecError
from yamltrace.examples.tiny import TinyModel

# The caps of a checkpoint folder's files, as docs/security.md states them.
MAX_HEADER_BYTES = 64 * 2**20  # one safetensors header
MAX_SHARD_INDEX_BYTES = 64 * 2**20  # a `*.index.json` of sharded weights
MAX_JSON_DEPTH = 64  # nesting of a folder's JSON files and headers

SPEC = "yamltrace: 1\nimports: [yamltrace.examples.tiny]\noutputs:\n  hidden_states: TinyDecoderLayer\n"
LOAD = """
from yamltrace.examples.tiny import TinyModel
TinyModel.from_pretrained(sys.argv[1])
"""


@pytest.fixture
def ckpt(tiny: TinyModel, tmp_path: Path) -> Path:
    save_pretrained(tiny, tmp_path / "ckpt", spec=SPEC)
    return tmp_path / "ckpt"


def _sharded(tiny: TinyModel, ckpt: Path, shard: str = "model-00001-of-00001.safetensors") -> None:
    (ckpt / "model.safetensors").unlink()
    (ckpt / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {n: shard for n in tiny.state_dict()}}))


@pytest.mark.slow  # a FIFO
def test_a_shard_index_naming_a_fifo_fails_instead_of_hanging(tiny: TinyModel, ckpt: Path) -> None:
    _sharded(tiny, ckpt)
    os.mkfifo(ckpt / "model-00001-of-00001.safetensors")
    assert bounded(LOAD, str(ckpt)) == (
        f"FolderError: {ckpt}/model-00001-of-00001.safetensors: the weights file is not a regular file (a FIFO); "
        "a FIFO, device or folder could block or never end: replace it with the file itself"
    )


@pytest.mark.slow  # a FIFO
def test_a_weights_file_that_is_a_fifo_is_refused_not_skipped(ckpt: Path) -> None:
    (ckpt / "model.safetensors").unlink()
    os.mkfifo(ckpt / "model.safetensors")
    assert bounded(LOAD, str(ckpt)).startswith(
        f"FolderError: {ckpt}/model.safetensors: the weights file is not a regular file (a FIFO)"
    )


def test_a_shard_that_links_out_of_the_folder_is_refused(tiny: TinyModel, ckpt: Path, tmp_path: Path) -> None:
    save_file({n: t.contiguous() for n, t in tiny.state_dict().items()}, str(tmp_path / "outside.safetensors"))
    _sharded(tiny, ckpt)
    os.symlink(tmp_path / "outside.safetensors", ckpt / "model-00001-of-00001.safetensors")
    with pytest.raises(FolderError, match="the weights file is a symbolic link that leaves its folder"):
        TinyModel.from_pretrained(ckpt)


def test_a_shard_index_and_a_safetensors_header_over_their_caps_are_refused_before_reading(tiny, ckpt: Path) -> None:
    with open(ckpt / "model.safetensors", "r+b") as f:
        f.write((MAX_HEADER_BYTES + 1).to_bytes(8, "little"))
        f.truncate(MAX_HEADER_BYTES + 100)  # sparse
    with pytest.raises(
        FolderError,
        match=rf"model\.safetensors: the weights file's header is [\d,]+ bytes, over the {MAX_HEADER_BYTES:,}-byte limit",
    ):
        TinyModel.from_pretrained(ckpt)
    _sharded(tiny, ckpt)
    with open(ckpt / "model.safetensors.index.json", "r+b") as f:
        f.truncate(MAX_SHARD_INDEX_BYTES + 1)
    with pytest.raises(FolderError, match=rf"the shard index is [\d,]+ bytes, over the {MAX_SHARD_INDEX_BYTES:,}-byte limit"):
        TinyModel.from_pretrained(ckpt)


def test_a_deep_config_is_a_located_error_not_a_recursion_error(ckpt: Path) -> None:
    (ckpt / "config.json").write_text('{"a": ' * 100_000 + "1" + "}" * 100_000)
    with pytest.raises(FolderError, match=rf"config\.json: the config nests deeper than {MAX_JSON_DEPTH} levels"):
        TinyModel.from_pretrained(ckpt)


def test_a_spec_that_links_out_of_the_folder_is_refused_unread(ckpt: Path, tmp_path: Path) -> None:
    secrets = tmp_path / "home" / "credentials.yaml"
    secrets.parent.mkdir()
    secrets.write_text("aws_secret_access_key: AKIA\ndb_password: hunter2\n")
    (ckpt / SPEC_FILE).unlink()
    os.symlink(secrets, ckpt / SPEC_FILE)
    with pytest.raises(FolderError, match="the checkpoint spec is a symbolic link that leaves its folder") as caught:
        TinyModel.from_pretrained(ckpt)
    assert "aws_secret_access_key" not in str(caught.value) and "db_password" not in str(caught.value)


@pytest.mark.slow  # a FIFO
@pytest.mark.parametrize("kind", ["fifo", "folder", "/dev/zero"])
def test_a_spec_that_is_not_a_regular_file_is_an_error_not_a_load_without_it(ckpt: Path, kind: str) -> None:
    (ckpt / SPEC_FILE).unlink()
    make = {"fifo": os.mkfifo, "folder": os.mkdir, "/dev/zero": lambda path: os.symlink("/dev/zero", path)}[kind]
    make(ckpt / SPEC_FILE)
    ending = bounded(LOAD, str(ckpt))
    assert ending.startswith(f"FolderError: {ckpt}/{SPEC_FILE}: the checkpoint spec "), ending


def test_a_checkpoint_without_a_spec_still_loads_without_one(ckpt: Path, input_ids: torch.Tensor) -> None:
    (ckpt / SPEC_FILE).unlink()
    assert not hasattr(TinyModel.from_pretrained(ckpt), "yamltrace_spec")


def _hub_layout(cache: Path, files: dict[str, bytes]) -> Path:
    """org/tiny@main as huggingface_hub caches it: each file in blobs/, linked from snapshots/COMMIT/."""
    repo = cache / "models--org--tiny"
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("c0ffee")
    snapshot = repo / "snapshots" / "c0ffee"
    snapshot.mkdir(parents=True)
    for name, data in files.items():
        blob = hashlib.sha256(data).hexdigest()
        (repo / "blobs" / blob).write_bytes(data)
        os.symlink(f"../../blobs/{blob}", snapshot / name)
    return snapshot


@pytest.fixture
def hub_files(tiny: TinyModel, ckpt: Path) -> dict[str, bytes]:
    files = {p.name: p.read_bytes() for p in ckpt.iterdir()}
    files[SPEC_FILE] = b"yamltrace: 1\nextends: base.yaml\noutputs:\n  mlp: {target: TinyMLP, index: 0}\n"
    files["base.yaml"] = SPEC.encode()
    return files


def test_extends_in_a_hub_cache_snapshot_resolves_beside_the_snapshot_link(tmp_path: Path, hub_files) -> None:
    snapshot = _hub_layout(tmp_path / "hub", hub_files)
    for path in (str(snapshot), "org/tiny"):
        loaded = from_pretrained(TinyModel, path, cache_dir=tmp_path / "hub", local_files_only=True)
        assert sorted(loaded.yamltrace_spec.outputs) == ["hidden_states", "mlp"], path


def test_an_extends_leaving_a_hub_snapshot_names_the_snapshot_folder(tmp_path: Path, hub_files) -> None:
    hub_files[SPEC_FILE] = b"yamltrace: 1\nextends: ../../../outside.yaml\noutputs: {}\n"
    snapshot = _hub_layout(tmp_path / "hub", hub_files)
    (tmp_path / "hub" / "outside.yaml").write_text(SPEC)
    with pytest.raises(SpecError, match=rf"leaves the spec's folder {snapshot} "):
        TinyModel.from_pretrained(snapshot)


def test_a_spec_given_to_the_load_replaces_an_unreadable_shipped_one(ckpt: Path) -> None:
    (ckpt / SPEC_FILE).unlink()
    (ckpt / SPEC_FILE).mkdir()
    loaded = TinyModel.from_pretrained(ckpt, spec=SPEC)
    assert list(loaded.yamltrace_spec.outputs) == ["hidden_states"]
