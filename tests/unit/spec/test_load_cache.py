"""Spec files and `builtin:` names are read and resolved once per content, and a change is always seen.

Every test that changes something between two loads checks that the second load gives what a load
with an empty cache gives (`fresh`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from helpers import DATA
from torch import nn

from yamltrace.errors import SpecError
from yamltrace.examples.tiny import TinyAttention, TinyConfig, TinyDecoderLayer, TinyMLP, TinyModel
from yamltrace.spec import ClassRegistry, default_registry, load_spec
from helpers_load_cache import target, write


def test_a_file_is_resolved_once_while_it_is_unchanged(tmp_path: Path) -> None:
    path = write(tmp_path / "spec.yaml")
    first = load_spec(path)
    assert load_spec(path) is first and load_spec(str(path)) is first
    assert target(first) is TinyDecoderLayer


def test_a_builtin_spec_is_resolved_once() -> None:
    assert load_spec("builtin:llama") is load_spec("builtin:llama")


def test_a_base_file_replaced_by_a_link_leaving_the_folder_is_refused_again(tmp_path: Path) -> None:
    folder, outside = tmp_path / "specs", tmp_path / "outside"
    folder.mkdir(), outside.mkdir()
    base = write(folder / "base.yaml", "TinyMLP")
    top = folder / "top.yaml"
    top.write_text("yamltrace: 1\nextends: base.yaml\noutputs: {}\n")
    load_spec(top)
    (outside / "base.yaml").write_bytes(base.read_bytes())  # the same bytes, outside the folder
    base.unlink()
    base.symlink_to(outside / "base.yaml")
    with pytest.raises(SpecError, match="leaves the spec's folder"):
        load_spec(top)


def test_the_same_relative_name_in_another_folder_is_another_file(tmp_path: Path, monkeypatch) -> None:
    for name, cls in (("a", "TinyMLP"), ("b", "TinyAttention")):
        (tmp_path / name).mkdir()
        write(tmp_path / name / "spec.yaml", cls)
    monkeypatch.chdir(tmp_path / "a")
    assert target(load_spec("spec.yaml")) is TinyMLP
    monkeypatch.chdir(tmp_path / "b")
    assert target(load_spec("spec.yaml")) is TinyAttention


def test_a_failed_load_is_not_kept(tmp_path: Path) -> None:
    path = write(tmp_path / "spec.yaml", "NoSuchLayer")
    with pytest.raises(SpecError, match="NoSuchLayer"):
        load_spec(path)
    write(path, "TinyMLP")
    assert target(load_spec(path)) is TinyMLP
    write(path, "NoSuchLayer")
    with pytest.raises(SpecError, match="NoSuchLayer"):
        load_spec(path)


def test_a_registration_change_is_seen(tmp_path: Path) -> None:
    path = write(tmp_path / "spec.yaml", "CachedName")
    registry = ClassRegistry(entry_point_group=None)
    registry.register("CachedName", TinyMLP)
    assert target(load_spec(path, registry=registry)) is TinyMLP
    registry.unregister("CachedName")
    registry.register("CachedName", TinyAttention)
    assert target(load_spec(path, registry=registry)) is TinyAttention
    with pytest.raises(SpecError, match="'CachedName' not found"):
        load_spec(path)  # the default registry never had it


def test_another_model_class_is_another_load(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text("yamltrace: 1\nmodel: TinyModel\nimports: [yamltrace.examples.tiny]\noutputs: {}\n")
    model = TinyModel(TinyConfig(num_hidden_layers=1))
    assert load_spec(path, for_model=model) is load_spec(path, for_model=model)
    with pytest.raises(SpecError, match="this spec is for 'TinyModel', but it is applied to Linear"):
        load_spec(path, for_model=nn.Linear(2, 2))


@pytest.fixture
def plugins(monkeypatch: pytest.MonkeyPatch):
    """tests/data/plugins on sys.path; its modules are forgotten afterwards."""
    default_registry.list()
    monkeypatch.syspath_prepend(str(DATA / "plugins"))
    yield
    for name in [m for m in sys.modules if m == "ytplugins" or m.startswith("ytplugins.")]:
        del sys.modules[name]


def test_consent_is_part_of_the_load_and_a_forgotten_module_needs_it_again(tmp_path: Path, plugins) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text("yamltrace: 1\noutputs:\n  hidden_states: ytplugins.side_effect:SideEffectLayer\n")
    with pytest.raises(SpecError, match="is not imported yet"):
        load_spec(path)
    trusted = load_spec(path, trust_imports=True)
    assert load_spec(path, trust_imports=True) is trusted
    assert load_spec(path) is not trusted  # imported now, so allowed, but another load
    del sys.modules["ytplugins.side_effect"]
    with pytest.raises(SpecError, match="is not imported yet"):
        load_spec(path)
