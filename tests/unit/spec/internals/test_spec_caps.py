"""A hostile spec cannot end the process, hang it or turn into a huge error: each cap (lists, the
`extends` chain, patch keys, YAML nodes, keys and texts, recorder integers, reserved keys) checked
at the private limit it names."""

from __future__ import annotations

from pathlib import Path

import pytest

from yamltrace.errors import MAX_MESSAGE_CHARS, SpecError
from yamltrace.spec import load_spec, validate_spec
from yamltrace.spec._limits import (
    MAX_EXTENDS_DEPTH,
    MAX_LIST_ITEMS,
    MAX_MAPPING_KEYS,
    MAX_NODES,
    MAX_PATCH_KEYS,
    MAX_RECORDER_INDEX,
    MAX_STRING_CHARS,
    RESERVED_OUTPUT_KEYS,
)
from yamltrace.spec._patterns import MAX_PATTERN_CHARS
from helpers_spec import refused, spec


def test_a_list_over_the_cap_is_refused_before_the_schema() -> None:
    items = ", ".join(f"{i}, m{i}" for i in range(MAX_LIST_ITEMS))
    message = refused(spec(f"imports: [{items}]\n"))
    assert f"a list of {2 * MAX_LIST_ITEMS} items is over the limit of {MAX_LIST_ITEMS} (MAX_LIST_ITEMS)" in message
    assert "is not a module name" not in message  # jsonschema never ran


def test_a_long_extends_chain_note_stays_small(tmp_path: Path) -> None:
    name = "b" * 200
    prev = None
    for i in range(MAX_EXTENDS_DEPTH):
        text = spec("outputs: {k: {target: A, index: one}}\n") + (f"extends: {prev}\n" if prev else "")
        prev = f"{name}{i}.yaml"
        (tmp_path / prev).write_text(text)
    with pytest.raises(SpecError) as info:
        validate_spec(tmp_path / prev)
    assert len(str(info.value)) < 2 * MAX_MESSAGE_CHARS


def chain(tmp_path: Path, length: int) -> Path:
    for i in range(length):
        (tmp_path / f"s{i}.yaml").write_text(spec(f"extends: s{i - 1}.yaml\n" if i else ""))
    return tmp_path / f"s{length - 1}.yaml"


def test_extends_chain_up_to_the_cap_is_read(tmp_path: Path) -> None:
    assert validate_spec(chain(tmp_path, MAX_EXTENDS_DEPTH)).data == {"yamltrace": 1}


def test_extends_chain_over_the_cap_is_refused(tmp_path: Path) -> None:
    message = refused(chain(tmp_path, MAX_EXTENDS_DEPTH + 1), load=False)
    assert f"longer than {MAX_EXTENDS_DEPTH} files (MAX_EXTENDS_DEPTH)" in message


def test_patch_keys_are_capped() -> None:
    patches = {f"^A{i}$": "torch.nn:Identity" for i in range(MAX_PATCH_KEYS + 1)}
    assert "(MAX_PATCH_KEYS)" in refused({"yamltrace": 1, "patches": patches})


def test_longest_accepted_patch_key_loads() -> None:
    key = "^" + "A" * (MAX_PATTERN_CHARS - 2) + "$"
    assert load_spec({"yamltrace": 1, "patches": {key: "torch.nn:Identity"}}).patches[0].pattern == key


def test_node_cap_counts_yaml_nodes() -> None:
    items = ", ".join(["a"] * (MAX_NODES))
    assert f"more than {MAX_NODES} YAML nodes (MAX_NODES" in refused(spec(f"imports: [{items}]\n"))


def test_node_cap_counts_the_whole_extends_chain(tmp_path: Path) -> None:
    half = ", ".join(["a"] * (MAX_NODES // 2))
    (tmp_path / "base.yaml").write_text(spec(f"model: [{half}]\n"))
    (tmp_path / "top.yaml").write_text(spec(f"extends: base.yaml\nimports: [{half}]\n"))
    assert "over the whole extends chain" in refused(tmp_path / "top.yaml", load=False)


def test_mapping_key_and_text_caps() -> None:
    outputs = {f"k{i}": "A" for i in range(MAX_MAPPING_KEYS + 1)}
    assert "(MAX_MAPPING_KEYS)" in refused({"yamltrace": 1, "outputs": outputs})
    assert "(MAX_STRING_CHARS)" in refused({"yamltrace": 1, "model": "A" * (MAX_STRING_CHARS + 1)})
    assert "(MAX_STRING_CHARS)" in refused({"yamltrace": 1, "outputs": {"k" * (MAX_STRING_CHARS + 1): "A"}})


@pytest.mark.parametrize("field, value", [("index", MAX_RECORDER_INDEX + 1), ("index", -(10**12)), ("layers", [0, 10**9])])
def test_recorder_integers_are_bounded(field: str, value) -> None:
    recorder = {"target": "torch.nn:Linear", field: value}
    assert "out of range" in refused({"yamltrace": 1, "outputs": {"h": recorder}})


@pytest.mark.parametrize("key", sorted(RESERVED_OUTPUT_KEYS))
def test_reserved_output_keys_are_refused(key: str) -> None:
    assert f"output key {key!r} is reserved" in refused({"yamltrace": 1, "outputs": {key: "torch.nn:Linear"}})
