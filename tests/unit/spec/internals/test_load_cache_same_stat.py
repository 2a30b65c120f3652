"""The load cache's content check: a spec file (or a base file of its `extends`) rewritten with the
same size and modification time is seen, compared with a load whose cache was emptied (`fresh`)."""

from __future__ import annotations

from pathlib import Path


from yamltrace.examples.tiny import TinyAttention, TinyDecoderLayer, TinyMLP
from yamltrace.spec import Spec, load_spec
from yamltrace.spec._load_cache import spec_loads
from helpers_load_cache import target, write


def fresh(source, **kwargs) -> Spec:
    """What a load gives with nothing kept."""
    spec_loads.clear()
    return load_spec(source, **kwargs)


def test_new_bytes_of_the_same_size_and_time_are_seen(tmp_path: Path) -> None:
    path = write(tmp_path / "spec.yaml", "TinyDecoderLayer")
    first = load_spec(path)
    size = path.stat().st_size
    write(path, "TinyAttention   ", keep_mtime=True)  # trailing blanks: as long as TinyDecoderLayer
    assert path.stat().st_size == size
    second = load_spec(path)
    assert second is not first and target(second) is TinyAttention
    assert second == fresh(path)


def test_a_changed_base_file_is_seen(tmp_path: Path) -> None:
    base = write(tmp_path / "base.yaml", "TinyMLP")
    top = tmp_path / "top.yaml"
    top.write_text("yamltrace: 1\nextends: base.yaml\noutputs:\n  attentions: yamltrace.examples.tiny:TinyAttention\n")
    first = load_spec(top)
    assert load_spec(top) is first and target(first) is TinyMLP
    write(base, "TinyDecoderLayer")
    second = load_spec(top)
    assert target(second) is TinyDecoderLayer and second == fresh(top)
