"""The caps on a spec's interventions (how many, how many tensor files, bytes per file, bytes read in
all, a tensor file's header), each reached by building input just over the private cap or by
lowering it; and the intervention selector fields, which are the recorder fields by reference."""

from __future__ import annotations

from pathlib import Path

import pytest

from yamltrace import SpecError, validate_spec
from yamltrace._recorder_fields import EDIT_FIELDS
from yamltrace.spec import _interventions, _limits, load_schema
from helpers_spec import issues, spec_text, tensor_spec, write


def test_the_intervention_selector_fields_are_the_recorder_fields_by_reference() -> None:
    properties = load_schema()["$defs"]["interventionObject"]["properties"]
    selector = {
        key for key in properties if "$ref" in properties[key] and "/recorderObject/properties/" in properties[key]["$ref"]
    }
    assert selector == {f.key for f in EDIT_FIELDS}
    assert all(properties[key]["$ref"] == f"#/$defs/recorderObject/properties/{key}" for key in selector)
    assert not {"detach", "to", "dtype", "optional", "capture_initial_hidden_state"} & set(properties)
    assert "mask" in selector  # it names the attention mask of positions last / first, as for captures


def test_too_many_interventions_are_refused() -> None:
    entries = {f"e{i}": {"class_name": "mlp", "scale": 2} for i in range(_limits.MAX_INTERVENTIONS + 1)}
    with pytest.raises(SpecError, match=r"65 interventions are over the limit of 64 \(MAX_INTERVENTIONS\)"):
        validate_spec({"yamltrace": 1, "interventions": entries})


def test_too_many_tensor_files_are_refused_at_the_first_one_over() -> None:
    entries = [f"e{i}: {{class_name: mlp, add: {{tensor: f{i}.safetensors:v}}}}" for i in range(_limits.MAX_TENSOR_FILES + 1)]
    entries.append("again: {class_name: mlp, set: {tensor: f0.safetensors:w}}")  # a file already counted
    with pytest.raises(SpecError) as caught:
        validate_spec(spec_text(*entries))
    (issue,) = caught.value.issues
    assert issue.json_path == f"$.interventions.e{_limits.MAX_TENSOR_FILES}.add.tensor"
    assert f"more than {_limits.MAX_TENSOR_FILES} tensor files (MAX_TENSOR_FILES)" in issue.message


def test_an_oversize_file_is_refused_from_its_size(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_interventions, "MAX_TENSOR_FILE_BYTES", 64)
    (found,) = issues(tensor_spec(folder, "steer.safetensors:honesty"))
    assert "(MAX_TENSOR_FILE_BYTES)" in found and "over the 64-byte limit" in found


def test_the_tensors_read_are_capped_together(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_interventions, "MAX_TENSOR_BYTES", 40)  # one 4-float32 tensor is 16 bytes
    path = write(folder, *(f"e{i}: {{class_name: mlp, add: {{tensor: steer.safetensors:honesty}}}}" for i in range(3)))
    (found,) = issues(path)
    assert "$.interventions.e2.add.tensor" in found and "(MAX_TENSOR_BYTES)" in found


def test_a_tensor_file_header_is_capped_before_it_is_parsed(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_interventions, "MAX_TENSOR_HEADER_BYTES", 16)
    (found,) = issues(tensor_spec(folder, "steer.safetensors:honesty"))
    assert "tensor file's header is" in found and "over the 16-byte limit" in found
