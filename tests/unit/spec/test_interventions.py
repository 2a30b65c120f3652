"""`interventions:` in a spec: the schema (one selector, exactly one operation), the content checks,
the loader (selectors as recorders, values, tensor files of the spec's folder under the folder rule),
`extends`, `to_yaml` and equality."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import save_file

from yamltrace import OutputRecorder, SpecError, load_spec, validate_spec
from yamltrace.engine import Intervention, RuntimeValue
from yamltrace.examples.tiny import TinyAttention, TinyDecoderLayer
from helpers_spec import LAYER, issues, spec_text, tensor_spec, write

ATTENTION = "yamltrace.examples.tiny:TinyAttention"


# The schema


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("a: {target: X, heads: [1]}", "$.interventions.a: no operation: add exactly one of zero: true"),
        ("a: {target: X, zero: true, add: 1}", "$.interventions.a: more than one operation"),
        ("a: {target: X, add: 1, scale: 2, clamp: [0, 1]}", "$.interventions.a: more than one operation"),
        ("a: {target: X, zero: true, detach: true}", "$.interventions.a.detach: unknown key 'detach'"),
        ("a: {target: X, zero: true, optional: true}", "$.interventions.a.optional: unknown key 'optional'"),
        ("a: {target: X, zero: true, mask: attention_mask}", "$.interventions.a: mask names the attention mask that positions"),
        ("a: {target: X, zero: true, hed_dim: 4}", "$.interventions.a.hed_dim: unknown key 'hed_dim'; did you mean 'head_dim'?"),
        ("a: {zero: true}", "$.interventions.a: give exactly one of 'target' (a class) or 'class_name'"),
        ("a: {target: X, class_name: y, zero: true}", "$.interventions.a: give exactly one of 'target'"),
        ("a: {target: X, zero: false}", "$.interventions.a.zero: zero takes true"),
        ("a: {target: X, head_dim: 4, zero: true}", "$.interventions.a: head_dim sets the size of the heads"),
        ("a: {target: X, heads: [-1], zero: true}", "$.interventions.a.heads[0]: a head is numbered from 0"),
        ("a: {target: X, heads: [1, 1], zero: true}", "$.interventions.a.heads: 1 is listed twice"),
        ("a: {target: X, input: 0, index: 0, zero: true}", "$.interventions.a: give either 'input'"),
        ("a: {target: X, scale: '2'}", "$.interventions.a.scale: '2' is not of type 'number'"),
        ("a: {target: X, add: [1, x]}", "$.interventions.a.add[1]: 'x' is not of type 'number'"),
        ("a: {target: X, add: []}", "$.interventions.a.add: [] should be non-empty"),
        ("a: {target: X, clamp: [1, 2, 3]}", "$.interventions.a.clamp: clamp takes two bounds"),
        (
            "a: {target: X, set: {tensor: a.safetensors}}",
            "$.interventions.a.set.tensor: 'a.safetensors' is not a tensor reference",
        ),
        ("a: {target: X, set: {tensor: 'a.pt:w'}}", "$.interventions.a.set.tensor: 'a.pt:w' is not a tensor reference"),
        ("a: {target: X, set: {tensor: 'd/a.safetensors:w'}}", "is not a tensor reference"),
        ("a: {target: X, set: {tensor: '..\\\\a.safetensors:w'}}", "is not a tensor reference"),
        ("a: {target: X, set: {value: 'not a name'}}", "$.interventions.a.set.value: 'not a name' is not an identifier"),
        ("a: {target: X, set: {tensor: a.safetensors:w, value: v}}", "$.interventions.a.set: give exactly one of 'tensor'"),
        ("a: {target: X, set: {vlaue: v}}", "$.interventions.a.set.vlaue: unknown key 'vlaue'; did you mean 'value'?"),
    ],
)
def test_validate_locates_each_schema_error_at_the_intervention(entry: str, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        validate_spec(spec_text(entry))
    rendered = [issue.render() for issue in caught.value.issues]
    assert any(message in line and line.startswith("<string>:3:") for line in rendered), rendered


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("a: {target: X, clamp: [null, null]}", "$.interventions.a.clamp: clamp [null, null] changes nothing"),
        ("a: {target: X, clamp: [3, 1]}", "$.interventions.a.clamp: clamp [3, 1]: low is above high; write [1, 3]"),
        ("a: {target: X, heads: [70000], zero: true}", "$.interventions.a.heads[0]: head 70000 is out of range"),
        ("a: {target: X, zero: true, layers: [99999999]}", "$.interventions.a.layers[0]: layer 99999999 is out of range"),
        ("a: {target: X, zero: true, positions: '1:2:0'}", "$.interventions.a.positions: the step of slice '1:2:0'"),
        ("a: {target: '__main__:X', zero: true}", "$.interventions.a.target: '__main__:X' names a __main__ module"),
    ],
)
def test_validate_refuses_interventions_that_cannot_run(entry: str, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        validate_spec(spec_text(entry))
    (issue,) = caught.value.issues
    assert issue.render().startswith("<string>:3:") and message in issue.render()


@pytest.mark.parametrize(
    "entry",
    [
        "a: {target: X, positions: last, add: 1.0}",
        "a: {target: X, positions: first, zero: true}",
        "a: {target: X, positions: last, mask: decoder_attention_mask, seq_dim: 1, scale: 2.0}",
    ],
)
def test_positions_last_and_first_and_mask_are_valid_for_interventions(entry: str) -> None:
    spec = load_spec(spec_text(entry.replace("target: X", "target: torch.nn:Linear")))
    (edit,) = spec.interventions
    assert edit.select.positions in ("last", "first")
    assert edit.select.mask == ("decoder_attention_mask" if "mask:" in entry else None)
    validate_spec(spec_text(entry))


def test_numbers_that_are_not_finite_are_refused() -> None:
    data = {
        "yamltrace": 1,
        "interventions": {"a": {"target": "X", "add": [1.0, float("nan")]}, "b": {"target": "X", "scale": float("inf")}},
    }
    with pytest.raises(SpecError) as caught:
        validate_spec(data)
    assert [(i.json_path, i.message.split(";")[0]) for i in caught.value.issues] == [
        ("$.interventions.a.add[1]", "nan is not a finite number"),
        ("$.interventions.b.scale", "inf is not a finite number"),
    ]


def test_validate_of_an_intervention_spec_imports_nothing(tmp_path: Path) -> None:
    path = write(tmp_path, f"a: {{target: {LAYER}, add: {{tensor: missing.safetensors:v}}}}")
    code = (
        "import sys\nfrom yamltrace.cli import main\n"
        f"print(main(['validate', {str(path)!r}]), 'torch' in sys.modules, 'safetensors' in sys.modules, file=sys.stderr)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stderr.strip().splitlines()[-1] == "0 False False", result.stderr


# The loader


def test_each_operation_and_selector_is_read() -> None:
    spec = load_spec(
        spec_text(
            f"ablate: {{target: {ATTENTION}, index: 0, heads: [1, 0], head_dim: 4, zero: true}}",
            f"steer: {{target: {LAYER}, layers: [0, -1], add: [0.5, -1]}}",
            "patch: {class_name: mlp, input: 0, positions: [-1], seq_dim: 1, set: {value: clean}}",
            "shrink: {class_name: .layers.0.mlp, layer_name: layers, scale: 2}",
            "bound: {class_name: mlp, clamp: [null, 3]}",
            "shift: {class_name: mlp, add: -1}",
        )
    )
    assert [i.name for i in spec.interventions] == ["ablate", "steer", "patch", "shrink", "bound", "shift"]
    ablate, steer, patch, shrink, bound, shift = spec.interventions
    assert ablate == Intervention("ablate", OutputRecorder(TinyAttention, index=0), "zero", None, (1, 0), 4)
    assert steer == Intervention("steer", OutputRecorder(TinyDecoderLayer, index=0, layers=[0, -1]), "add", (0.5, -1.0))
    assert patch.select == OutputRecorder(class_name="mlp", input=0, positions=[-1]) and patch.value == RuntimeValue("clean")
    assert shrink.select == OutputRecorder(class_name=".layers.0.mlp", layer_name="layers") and shrink.value == 2.0
    assert (bound.operation, bound.value) == ("clamp", (None, 3.0))
    assert (shift.operation, shift.value) == ("add", -1.0) and isinstance(shift.value, float)


def test_the_default_index_is_the_main_output_whatever_the_name() -> None:
    (edit,) = load_spec(spec_text(f"attentions: {{target: {ATTENTION}, zero: true}}")).interventions
    assert edit.select.index == 0


def test_where_locates_each_intervention(tmp_path: Path) -> None:
    path = write(tmp_path, "a: {class_name: mlp, zero: true}", "b:", "    class_name: mlp", "    scale: 2")
    a, b = load_spec(path).interventions
    assert (a.where.file, a.where.line, a.where.json_path) == (str(path), 3, "$.interventions.a")
    assert (b.where.line, b.where.column, b.where.json_path) == (5, 7, "$.interventions.b")


def test_class_errors_are_gathered_and_located() -> None:
    found = issues(
        spec_text(
            "a: {target: yamltrace.examples.tiny:TinyAtention, zero: true}",
            "b: {target: [yamltrace.examples.tiny:TinyMLP, no.such.module:Thing], zero: true}",
            "c: {target: torch.nn:Linear, positions: [0], zero: true}",
        )
    )
    assert len(found) == 2, found
    assert found[0].startswith("<string>:3:") and "$.interventions.a.target" in found[0] and "TinyAttention" in found[0]
    assert found[1].startswith("<string>:4:") and "$.interventions.b.target[1]" in found[1]


def test_a_selector_value_no_recorder_accepts_is_located() -> None:
    found = issues(spec_text("a: {class_name: mlp, num_hidden_layers_key: to_dict, zero: true}"))
    assert any("$.interventions.a.num_hidden_layers_key" in line and "is not a config attribute" in line for line in found)


# Tensor files


def test_a_tensor_is_read_from_the_spec_folder_and_keeps_its_reference(folder: Path) -> None:
    (edit,) = load_spec(tensor_spec(folder, "steer.safetensors:honesty")).interventions
    assert torch.equal(edit.value, torch.arange(4.0)) and edit.reference == "steer.safetensors:honesty"


def test_a_tensor_is_read_relative_to_the_spec_not_the_current_folder(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tensor_spec(folder, "steer.safetensors:honesty")
    monkeypatch.chdir(folder.parent)
    (edit,) = load_spec(path).interventions
    assert torch.equal(edit.value, torch.arange(4.0))


def test_missing_files_and_names_are_located(folder: Path) -> None:
    (missing,) = issues(tensor_spec(folder, "other.safetensors:honesty"))
    assert ":3:" in missing and "$.interventions.steer.add.tensor" in missing and "tensor file not found" in missing
    (name,) = issues(tensor_spec(folder, "steer.safetensors:honsty"))
    assert "steer.safetensors has no tensor 'honsty'; did you mean 'honesty'?" in name
    (metadata,) = issues(tensor_spec(folder, "steer.safetensors:__metadata__"))
    assert "has no tensor '__metadata__'" in metadata


def test_an_integer_tensor_is_refused(folder: Path) -> None:
    (found,) = issues(tensor_spec(folder, "steer.safetensors:count"))
    assert "steer.safetensors:count is I64; an edit value is floating point" in found


def test_a_tensor_that_is_not_finite_is_refused(folder: Path) -> None:
    save_file({"bad": torch.tensor([1.0, float("nan")])}, str(folder / "bad.safetensors"))
    (found,) = issues(tensor_spec(folder, "bad.safetensors:bad"))
    assert "$.interventions.steer.add.tensor" in found and "holds values that are not finite" in found


def test_a_symlink_out_of_the_folder_is_refused(folder: Path) -> None:
    outside = folder.parent / "outside.safetensors"
    save_file({"honesty": torch.ones(4)}, str(outside))
    (folder / "link.safetensors").symlink_to(outside)
    (found,) = issues(tensor_spec(folder, "link.safetensors:honesty"))
    assert "$.interventions.steer.add.tensor" in found and "is a symbolic link that leaves its folder" in found


def test_a_symlink_inside_the_folder_is_read(folder: Path) -> None:
    (folder / "alias.safetensors").symlink_to(folder / "steer.safetensors")
    (edit,) = load_spec(tensor_spec(folder, "alias.safetensors:honesty")).interventions
    assert torch.equal(edit.value, torch.arange(4.0))


@pytest.mark.parametrize("reference", ["../steer.safetensors:honesty", "/tmp/steer.safetensors:honesty", "..safetensors:x"])
def test_a_path_out_of_the_folder_is_refused_before_anything_is_read(folder: Path, reference: str) -> None:
    (found,) = issues(tensor_spec(folder, reference))
    assert "$.interventions.steer.add.tensor" in found
    assert "is not a tensor reference" in found or "not found" in found


@pytest.mark.slow  # a FIFO
def test_a_folder_or_fifo_named_like_a_tensor_file_is_refused(folder: Path) -> None:
    (folder / "dir.safetensors").mkdir()
    os.mkfifo(folder / "pipe.safetensors")
    (directory,) = issues(tensor_spec(folder, "dir.safetensors:honesty"))
    assert "is not a regular file" in directory
    (pipe,) = issues(tensor_spec(folder, "pipe.safetensors:honesty"))
    assert "is not a regular file" in pipe


def test_a_pickle_renamed_safetensors_is_refused_and_never_unpickled(folder: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (Path.touch, (str(marker),))

    torch.save({"honesty": Payload()}, folder / "evil.safetensors")
    (found,) = issues(tensor_spec(folder, "evil.safetensors:honesty"))
    assert "$.interventions.steer.add.tensor" in found and "not a safetensors file" in found
    assert not marker.exists()


def test_a_spec_without_a_folder_cannot_read_tensor_files(folder: Path) -> None:
    entry = f"steer: {{target: {LAYER}, add: {{tensor: steer.safetensors:honesty}}}}"
    for source in (spec_text(entry), yaml.safe_load(spec_text(entry))):
        (found,) = issues(source)
        assert "$.interventions.steer.add.tensor" in found and "has no folder to read tensor files from" in found


# extends


def test_extends_merges_interventions_per_entry_in_the_base_order(folder: Path) -> None:
    (folder / "base").mkdir()
    save_file({"v": torch.ones(2)}, str(folder / "base" / "vectors.safetensors"))
    write(
        folder / "base",
        "first: {class_name: mlp, scale: 2}",
        "second: {class_name: mlp, add: {tensor: vectors.safetensors:v}}",
        "third: {class_name: mlp, zero: true}",
        name="base.yaml",
    )
    path = folder / "child.yaml"
    path.write_text(spec_text("second: {class_name: mlp, scale: 3}", "fourth: {class_name: mlp, clamp: [0, 1]}").replace(
        "interventions:", "extends: base/base.yaml\ninterventions:"), encoding="utf-8")  # fmt: skip
    spec = load_spec(path)
    assert [(i.name, i.operation) for i in spec.interventions] == [
        ("first", "scale"),
        ("second", "scale"),
        ("third", "zero"),
        ("fourth", "clamp"),
    ]
    first, _, _, fourth = spec.interventions
    assert first.where.file.endswith(os.path.join("base", "base.yaml")) and first.where.line == 3
    assert fourth.where.file == str(path) and fourth.where.line == 5


def test_a_base_spec_reads_its_tensors_from_its_own_folder(folder: Path) -> None:
    (folder / "base").mkdir()
    save_file({"v": torch.ones(2)}, str(folder / "base" / "vectors.safetensors"))
    write(folder / "base", "steer: {class_name: mlp, add: {tensor: vectors.safetensors:v}}", name="base.yaml")
    path = folder / "child.yaml"
    path.write_text("yamltrace: 1\nextends: base/base.yaml\n", encoding="utf-8")
    (edit,) = load_spec(path).interventions
    assert torch.equal(edit.value, torch.ones(2))


# to_yaml and equality


def test_to_yaml_writes_interventions_back_equal(folder: Path) -> None:
    path = write(
        folder,
        f"steer: {{target: {LAYER}, layers: [1], positions: '-2:', add: {{tensor: steer.safetensors:honesty}}}}",
        f"ablate: {{target: [{ATTENTION}, {LAYER}], heads: [0], head_dim: 2, zero: true}}",
        "patch: {class_name: mlp, input: hidden_states, set: {value: clean}}",
        "vector: {class_name: mlp, add: [1, 2.5]}",
        "bound: {class_name: mlp, index: 1, clamp: [-1, null]}",
        "half: {class_name: mlp, layer_name: layers, num_hidden_layers_key: n_layer, seq_dim: 2, scale: 0.5}",
    )
    spec = load_spec(path)
    written = spec.to_yaml()
    data = yaml.safe_load(written)["interventions"]
    assert list(data) == ["steer", "ablate", "patch", "vector", "bound", "half"]
    assert data["steer"]["add"] == {"tensor": "steer.safetensors:honesty"} and data["patch"] == {
        "class_name": "mlp", "input": "hidden_states", "set": {"value": "clean"}}  # fmt: skip
    (folder / "again.yaml").write_text(written, encoding="utf-8")
    again = load_spec(folder / "again.yaml")
    assert again == spec and again.interventions == spec.interventions
    assert load_spec(folder / "again.yaml").to_yaml() == written


def test_a_tensor_read_from_no_file_cannot_be_written() -> None:
    from yamltrace import Spec

    spec = Spec({}, interventions=[Intervention("steer", OutputRecorder(class_name="mlp"), "add", torch.ones(2))])
    with pytest.raises(ValueError, match="read from no file"):
        spec.to_yaml()


def test_a_capture_only_field_of_a_selector_cannot_be_written() -> None:
    from yamltrace import Spec

    spec = Spec({}, interventions=[Intervention("z", OutputRecorder(class_name="mlp", detach=True), "zero")])
    with pytest.raises(ValueError, match="detach=True does not apply here"):
        spec.to_yaml()


def test_tensor_values_compare_by_value_and_hash() -> None:
    select = OutputRecorder(class_name="mlp")
    one = Intervention("s", select, "add", torch.arange(3.0), reference="a.safetensors:v")
    same = Intervention("s", select, "add", torch.arange(3.0), reference="b.safetensors:w")
    other = Intervention("s", select, "add", torch.arange(3.0) + 1)
    wider = Intervention("s", select, "add", torch.arange(3.0, dtype=torch.float64))
    assert one == same and hash(one) == hash(same) and len({one, same}) == 1
    assert one != other and one != wider and one != Intervention("s", select, "add", (0.0, 1.0, 2.0))
    assert Intervention("z", select, "zero") == Intervention("z", select, "zero")
    from yamltrace import Spec

    assert Spec({}, interventions=[one]) == Spec({}, interventions=[same])
    assert hash(Spec({}, interventions=[one])) == hash(Spec({}, interventions=[same]))
    assert Spec({}, interventions=[one]) != Spec({}, interventions=[other])


def test_a_loaded_spec_with_tensor_values_hashes_like_its_equal(folder: Path) -> None:
    path = tensor_spec(folder, "steer.safetensors:honesty")
    spec, again = load_spec(path), load_spec(path)
    assert spec == again and hash(spec) == hash(again) and len({spec, again}) == 1
