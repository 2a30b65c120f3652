"""The untrusted-folder rule: bare names, regular files, links that stay inside, sizes checked first."""

from __future__ import annotations

import os

import pytest

from yamltrace._folder import folder_file, read_bytes
from yamltrace.errors import FolderError, YamltraceError


@pytest.fixture
def folder(tmp_path):
    inside = tmp_path / "ckpt"
    inside.mkdir()
    (inside / "a.json").write_text("{}")
    (tmp_path / "secret.txt").write_text("outside")
    return inside


@pytest.mark.parametrize("name", ["../secret.txt", "/etc/passwd", "", ".", "..", "sub/a.json", "a\x00b", "a\\b"])
def test_names_that_are_not_bare_file_names_are_refused(folder, name):
    with pytest.raises(FolderError, match="not a bare file name"):
        read_bytes(folder, name, max_bytes=100)


def test_a_regular_file_inside_is_read(folder):
    assert read_bytes(folder, "a.json", max_bytes=100) == b"{}"
    assert folder_file(folder, "a.json") == folder / "a.json"


def test_a_missing_file_is_none_only_when_allowed(folder):
    assert folder_file(folder, "nope.json", missing_ok=True) is None
    with pytest.raises(FolderError, match="not found"):
        folder_file(folder, "nope.json")


def test_a_fifo_is_refused_without_blocking(folder):
    os.mkfifo(folder / "pipe.json")
    with pytest.raises(FolderError, match="not a regular file .a FIFO."):
        read_bytes(folder, "pipe.json", max_bytes=100)


def test_a_directory_and_a_device_are_refused(folder):
    (folder / "dir.json").mkdir()
    os.symlink("/dev/zero", folder / "zero.json")
    with pytest.raises(FolderError, match="a folder"):
        folder_file(folder, "dir.json")
    with pytest.raises(FolderError, match="leaves its folder"):
        folder_file(folder, "zero.json")


def test_links_may_not_leave_the_folder(folder):
    os.symlink("../secret.txt", folder / "out.json")
    os.symlink("a.json", folder / "in.json")
    with pytest.raises(FolderError, match="leaves its folder"):
        read_bytes(folder, "out.json", max_bytes=100)
    assert read_bytes(folder, "in.json", max_bytes=100) == b"{}"


def test_hub_cache_snapshot_links_into_its_own_blobs(tmp_path):
    repo = tmp_path / "models--org--name"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / "abc123").write_text("{}")
    snapshot = repo / "snapshots" / "rev1"
    snapshot.mkdir(parents=True)
    os.symlink("../../blobs/abc123", snapshot / "config.json")
    other = tmp_path / "models--org--other" / "blobs"
    other.mkdir(parents=True)
    (other / "x").write_text("{}")
    os.symlink(str(other / "x"), snapshot / "foreign.json")
    assert read_bytes(snapshot, "config.json", max_bytes=100) == b"{}"
    with pytest.raises(FolderError, match="leaves its folder"):
        read_bytes(snapshot, "foreign.json", max_bytes=100)


def test_sizes_are_checked_before_reading(folder):
    (folder / "big.json").write_bytes(b"x" * 101)
    with pytest.raises(FolderError, match="over the 100-byte limit"):
        read_bytes(folder, "big.json", max_bytes=100)
    assert issubclass(FolderError, YamltraceError)
