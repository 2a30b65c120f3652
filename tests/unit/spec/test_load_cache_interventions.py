"""Specs with interventions are kept by the load cache too, their tensor files part of the content
check: a tensor file rewritten (same size, same modification time) is seen, and a kept `Spec` shared
between blocks keeps its tensors as they were read."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from safetensors.torch import save_file

import yamltrace
from yamltrace.examples.tiny import TinyModel
from yamltrace.spec import load_spec
from helpers_load_cache import STEER, keep_mtime, steered, value


def test_a_spec_with_tensor_interventions_is_resolved_once(tmp_path: Path) -> None:
    path = steered(tmp_path, torch.ones(32))
    first = load_spec(path)
    assert load_spec(path) is first and load_spec(str(path)) is first
    assert torch.equal(value(first), torch.ones(32))


def test_a_header_that_moves_the_tensor_is_seen(tmp_path: Path) -> None:
    """Same bytes of the vector, now at other offsets after another tensor: a new header entry."""
    path = steered(tmp_path, torch.ones(32), w=torch.zeros(32))
    first = load_spec(path)
    tensors = tmp_path / "steer.safetensors"
    keep_mtime(tensors, lambda: save_file({"v": torch.zeros(32), "a": torch.ones(32)}, str(tensors)))
    second = load_spec(path)
    assert second is not first and torch.equal(value(second), torch.zeros(32))


def test_a_tensor_file_removed_is_the_located_error_again(tmp_path: Path) -> None:
    import pytest

    from yamltrace.errors import SpecError

    path = steered(tmp_path, torch.ones(32))
    load_spec(path)
    (tmp_path / "steer.safetensors").unlink()
    with pytest.raises(SpecError, match=r"steer\.yaml:4:\d+: \$\.interventions\.steer\.add\.tensor: .*not found"):
        load_spec(path)


def test_a_changed_yaml_with_the_same_size_and_time_is_seen(tmp_path: Path) -> None:
    path = steered(tmp_path, torch.ones(32))
    first = load_spec(path)
    keep_mtime(path, lambda: path.write_text(STEER.replace("scale: 0.5", "scale: 0.7"), encoding="utf-8"))
    second = load_spec(path)
    assert second is not first and second.interventions[1].value == 0.7


def test_a_runtime_value_spec_is_kept_and_each_block_takes_its_own_values(tmp_path: Path, tiny: TinyModel, input_ids) -> None:
    path = tmp_path / "patch.yaml"
    path.write_text(STEER.replace('{tensor: "steer.safetensors:v"}', "{value: vec}"), encoding="utf-8")
    assert load_spec(path) is load_spec(path)
    with torch.no_grad():
        plain = tiny(input_ids).last_hidden_state
        outputs = []
        for vec in (torch.zeros(32), torch.ones(32), torch.zeros(32)):
            with yamltrace.intervene(tiny, path, values={"vec": vec}):
                outputs.append(tiny(input_ids).last_hidden_state)
    assert torch.equal(outputs[0], outputs[2]) and not torch.equal(outputs[0], outputs[1])
    assert not torch.equal(plain, outputs[0])  # the scale still applies


def test_a_kept_spec_shared_by_blocks_keeps_its_tensor_as_read(tmp_path: Path, tiny: TinyModel, input_ids) -> None:
    """Each block converts the value for the model (here float64) on its own edit, never in the Spec."""
    path = steered(tmp_path, torch.ones(32))
    spec = load_spec(path)
    model = tiny.double()
    with torch.no_grad():
        outputs = []
        for _ in range(3):
            with yamltrace.intervene(model, path):
                outputs.append(model(input_ids).last_hidden_state)
    assert load_spec(path) is spec
    assert value(spec).dtype == torch.float32 and torch.equal(value(spec), torch.ones(32))
    assert outputs[0].dtype == torch.float64
    assert torch.equal(outputs[0], outputs[1]) and torch.equal(outputs[1], outputs[2])


def test_a_tensor_file_replaced_by_a_link_out_of_the_folder_is_refused_again(tmp_path: Path) -> None:
    import pytest

    from yamltrace.errors import SpecError

    folder, outside = tmp_path / "specs", tmp_path / "outside"
    folder.mkdir(), outside.mkdir()
    path = steered(folder, torch.ones(32))
    load_spec(path)
    tensors = folder / "steer.safetensors"
    (outside / "steer.safetensors").write_bytes(tensors.read_bytes())  # the very same bytes
    tensors.unlink()
    tensors.symlink_to(outside / "steer.safetensors")
    with pytest.raises(SpecError, match=r"symbolic link that leaves its folder"):
        load_spec(path)


def _two_versions(tmp_path: Path) -> tuple[Path, Path]:
    """v1/ and v2/, each the same steer.yaml beside a steer.safetensors of another vector (1.0, then 100.0)."""
    v1, v2 = tmp_path / "v1", tmp_path / "v2"
    v1.mkdir(), v2.mkdir()
    steered(v1, torch.full((32,), 1.0)), steered(v2, torch.full((32,), 100.0))
    return v1, v2


def test_a_re_pointed_folder_link_is_another_spec(tmp_path: Path) -> None:
    v1, v2 = _two_versions(tmp_path)
    current = tmp_path / "current"
    current.symlink_to(v1)
    assert torch.equal(value(load_spec(current / "steer.yaml")), torch.full((32,), 1.0))
    current.unlink()
    current.symlink_to(v2)
    assert torch.equal(value(load_spec(current / "steer.yaml")), torch.full((32,), 100.0))


def test_a_re_pointed_file_link_is_another_spec(tmp_path: Path) -> None:
    v1, v2 = _two_versions(tmp_path)
    link = tmp_path / "spec.yaml"
    link.symlink_to(v1 / "steer.yaml")
    assert torch.equal(value(load_spec(link)), torch.full((32,), 1.0))
    link.unlink()
    link.symlink_to(v2 / "steer.yaml")
    assert torch.equal(value(load_spec(link)), torch.full((32,), 100.0))


def test_a_relative_name_after_chdir_is_another_spec(tmp_path: Path, monkeypatch) -> None:
    v1, v2 = _two_versions(tmp_path)
    monkeypatch.chdir(v1)
    assert torch.equal(value(load_spec("steer.yaml")), torch.full((32,), 1.0))
    monkeypatch.chdir(v2)
    assert torch.equal(value(load_spec("steer.yaml")), torch.full((32,), 100.0))


def test_a_same_size_rewrite_with_the_time_put_back_is_seen_by_its_change_time(tmp_path: Path) -> None:
    path = steered(tmp_path, torch.ones(32))
    first = load_spec(path)
    tensors = tmp_path / "steer.safetensors"
    data = bytearray(tensors.read_bytes())
    data[-4:] = torch.tensor([5.0]).numpy().tobytes()  # the last element, written in place
    keep_mtime(tensors, lambda: tensors.open("r+b").write(bytes(data)))
    second = load_spec(path)
    assert second is not first and value(second)[-1] == 5.0 and value(second)[0] == 1.0


PEAK = """\
import os, resource, sys, torch
from yamltrace.spec import load_spec
folder = sys.argv[1]
load_spec(os.path.join(folder, "small.yaml"))  # imports and first-use allocations
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
load_spec(os.path.join(folder, "steer.yaml"))
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print((after - before) * (1 if sys.platform == "darwin" else 1024))
"""


def test_loading_a_tensor_file_peaks_at_most_1_2_times_the_file(tmp_path: Path) -> None:
    """A 64 MiB tensor: read into its own buffer, its values checked without a mask of its size."""
    import subprocess
    import sys

    big = steered(tmp_path, torch.randn(16 * 2**20))
    small = tmp_path / "small"
    small.mkdir()
    steered(small, torch.ones(32)).rename(tmp_path / "small.yaml")
    (small / "steer.safetensors").rename(tmp_path / "small.safetensors")
    (tmp_path / "small.yaml").write_text(STEER.replace("steer.safetensors", "small.safetensors"), encoding="utf-8")
    size = (tmp_path / "steer.safetensors").stat().st_size
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", PEAK, str(tmp_path)], capture_output=True, text=True, env=env, check=True)
    peak = int(out.stdout.split()[-1])
    assert big.exists() and peak <= 1.2 * size, f"peak {peak / size:.2f}x the file"
