"""The load cache's content check of tensor files: one rewritten with the same size and modification
time is seen, and an unchanged one is not hashed again (counted on the cache's digest)."""

from __future__ import annotations

import os

from pathlib import Path

import torch
from safetensors.torch import save_file

from yamltrace.spec import load_spec
from yamltrace.spec._load_cache import spec_loads
from helpers_load_cache import keep_mtime, steered, value


def test_a_tensor_file_rewritten_with_the_same_size_and_time_is_seen(tmp_path: Path) -> None:
    path = steered(tmp_path, torch.ones(32))
    first = load_spec(path)
    tensors = tmp_path / "steer.safetensors"
    size = tensors.stat().st_size
    keep_mtime(tensors, lambda: save_file({"v": torch.full((32,), 3.0)}, str(tensors)))
    assert tensors.stat().st_size == size
    second = load_spec(path)
    assert second is not first and torch.equal(value(second), torch.full((32,), 3.0))
    assert load_spec(path) is second
    spec_loads.clear()
    assert torch.equal(value(load_spec(path)), value(second))


def test_a_kept_spec_whose_tensor_file_is_unchanged_pays_no_hash(tmp_path: Path, monkeypatch) -> None:
    """An unchanged tensor file (same real path, device, inode, size, mtime_ns, ctime_ns) is not read
    again; a touched one is checked by content once, then its new identity is kept."""
    from yamltrace.spec import _load_cache

    path = steered(tmp_path, torch.ones(32))
    first = load_spec(path)
    hashed: list[int] = []
    digest = _load_cache.tensor_digest
    monkeypatch.setattr(_load_cache, "tensor_digest", lambda data: hashed.append(len(data)) or digest(data))
    for _ in range(3):
        assert load_spec(path) is first
    assert hashed == []
    os.utime(tmp_path / "steer.safetensors")  # the same bytes, a new modification (and change) time
    assert load_spec(path) is first and hashed == [32 * 4]
    assert load_spec(path) is first and hashed == [32 * 4]
