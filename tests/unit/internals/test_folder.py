"""The untrusted-folder rule: bare names, regular files, links that stay inside, sizes checked first."""

from __future__ import annotations

import os
from pathlib import Path

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


@pytest.mark.slow  # a FIFO
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


def test_json_is_parsed_with_located_errors_and_a_depth_cap(folder):
    from yamltrace._folder import MAX_JSON_DEPTH, read_json

    (folder / "ok.json").write_text('{"a": [1, {"b": 2}]}')
    assert read_json(folder, "ok.json", max_bytes=100) == {"a": [1, {"b": 2}]}
    (folder / "bad.json").write_text('{"a":\n  }')
    with pytest.raises(FolderError, match=r"bad\.json:2:3: the file is not valid JSON"):
        read_json(folder, "bad.json", max_bytes=100)
    (folder / "deep.json").write_text("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1))
    with pytest.raises(FolderError, match=f"nests deeper than {MAX_JSON_DEPTH} levels"):
        read_json(folder, "deep.json", max_bytes=1000)
    (folder / "deep.json").write_text("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH)
    assert read_json(folder, "deep.json", max_bytes=1000) is not None
    hidden = "[" + '"' + "]" * 2000 + '", ' + "[" * 2000 + "]" * 2000 + "]"  # the string's brackets hide the depth
    (folder / "hidden.json").write_text(hidden)
    with pytest.raises(FolderError, match="nests deeper than Python can parse"):
        read_json(folder, "hidden.json", max_bytes=10_000)


@pytest.mark.slow  # a FIFO
def test_a_safetensors_header_is_read_after_its_length_is_checked(folder):
    from yamltrace._folder import safetensors_header

    header = b'{"__metadata__": {"k": "v"}}'
    (folder / "ok.safetensors").write_bytes(len(header).to_bytes(8, "little") + header)
    assert safetensors_header(folder, "ok.safetensors") == {"__metadata__": {"k": "v"}}
    (folder / "short.safetensors").write_bytes(b"\x05\x00")
    with pytest.raises(FolderError, match="cut short or not a safetensors file"):
        safetensors_header(folder, "short.safetensors")
    os.mkfifo(folder / "pipe.safetensors")
    with pytest.raises(FolderError, match="not a regular file .a FIFO."):
        safetensors_header(folder, "pipe.safetensors")


def test_a_hub_subfolder_links_into_its_blobs_and_names_resolve_beside_the_link(tmp_path):
    from yamltrace._folder import names_folder

    repo = tmp_path / "models--org--name"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / "abc").write_text("{}")
    sub = repo / "snapshots" / "rev1" / "sub"
    sub.mkdir(parents=True)
    os.symlink("../../../blobs/abc", sub / "config.json")
    assert read_bytes(sub, "config.json", max_bytes=10) == b"{}"
    assert names_folder(sub / "config.json") == str(sub)
    plain = tmp_path / "plain"
    plain.mkdir()
    os.symlink(repo / "blobs" / "abc", plain / "link.json")
    assert names_folder(plain / "link.json") == str(repo / "blobs")


def test_json_with_too_many_objects_lists_and_strings_is_refused_before_parsing(folder, monkeypatch):
    from yamltrace import _folder

    monkeypatch.setattr(_folder, "MAX_JSON_ITEMS", 10)
    (folder / "many.json").write_text("[" + ",".join(["[]"] * 10) + "]")
    (folder / "strings.json").write_text("[" + ",".join(['"a"'] * 11) + "]")
    with pytest.raises(FolderError, match=r"holds 12 objects, lists and strings"):
        _folder.read_json(folder, "strings.json", max_bytes=1000)
    with pytest.raises(FolderError, match=r"holds 11 objects, lists and strings, over 10 \(MAX_JSON_ITEMS\)"):
        _folder.read_json(folder, "many.json", max_bytes=1000)


def _names_folder_by_definition(path):
    """`names_folder` spelled out: the folder of the link's target, except a Hub snapshot link into its
    own `blobs/`, whose names are the snapshot's."""
    real = os.path.realpath(path)
    named_in = os.path.realpath(os.path.dirname(os.path.abspath(path)))
    for snapshot in (Path(named_in), *Path(named_in).parents):
        if snapshot.parent.name == "snapshots" and "--" in snapshot.parent.parent.name:
            blobs = os.path.realpath(snapshot.parent.parent / "blobs")
            if real == blobs or real.startswith(blobs + os.sep):
                return named_in
    return os.path.dirname(real)


def test_a_resolved_file_is_its_real_path_and_the_folder_its_names_resolve_against(tmp_path, monkeypatch):
    from yamltrace._folder import names_folder, resolved_file

    repo = tmp_path / "models--org--name"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / "abc").write_text("{}")
    snapshot = repo / "snapshots" / "rev1"
    (snapshot / "sub").mkdir(parents=True)
    os.symlink("../../blobs/abc", snapshot / "spec.yaml")
    os.symlink("../../../blobs/abc", snapshot / "sub" / "spec.yaml")
    (snapshot / "own.yaml").write_text("{}")
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "spec.yaml").write_text("{}")
    os.symlink(plain / "spec.yaml", tmp_path / "file_link.yaml")
    os.symlink(plain, tmp_path / "folder_link")
    os.symlink(repo / "blobs" / "abc", plain / "blob_link.yaml")
    os.symlink(snapshot, tmp_path / "snapshot_link")
    monkeypatch.chdir(plain)
    paths = [
        plain / "spec.yaml",
        tmp_path / "file_link.yaml",
        tmp_path / "folder_link" / "spec.yaml",
        plain / "blob_link.yaml",
        snapshot / "spec.yaml",
        snapshot / "sub" / "spec.yaml",
        snapshot / "own.yaml",
        tmp_path / "snapshot_link" / "spec.yaml",
        "spec.yaml",
        "../folder_link/spec.yaml",
        plain / "missing.yaml",
    ]
    for path in paths:
        expected = (os.path.realpath(path), _names_folder_by_definition(path))
        assert resolved_file(path) == expected, path
        assert names_folder(path) == expected[1], path
    assert resolved_file(snapshot / "spec.yaml") == (str(repo / "blobs" / "abc"), str(snapshot))
    assert resolved_file(tmp_path / "folder_link" / "spec.yaml") == (str(plain / "spec.yaml"), str(plain))
