"""`extract` with a spec that has interventions: the activations of the edited (steered) model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

import yamltrace
from yamltrace.extraction import extract

STEERED = """\
yamltrace: 1
imports: [yamltrace.examples.tiny]
outputs: {hidden_states: TinyDecoderLayer}
interventions:
  steer: {target: TinyDecoderLayer, layers: [1], add: {tensor: "steer.safetensors:v"}}
"""
RUNTIME = {
    "yamltrace": 1,
    "imports": ["yamltrace.examples.tiny"],
    "outputs": {"hidden_states": "TinyDecoderLayer"},
    "interventions": {"steer": {"target": "TinyDecoderLayer", "layers": [1], "add": {"value": "direction"}}},
}
VECTOR = torch.linspace(-1.0, 1.0, 32)


def _steered_captures(model, batches) -> list[torch.Tensor]:
    """What each layer's hidden state is when a plain forward hook adds the vector to layer 1's output."""
    handle = model.layers[1].register_forward_hook(lambda module, args, out: out + VECTOR)
    try:
        with torch.inference_mode(), yamltrace.trace(model, {"hidden_states": type(model.layers[0])}) as captures:
            for batch in batches:
                model(**batch)
    finally:
        handle.remove()
    steps = [dict(step)["hidden_states"] for step in captures.steps]
    return [torch.cat([step[layer] for step in steps]) for layer in range(len(steps[0]))]


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    save_file({"v": VECTOR}, str(tmp_path / "steer.safetensors"))
    (tmp_path / "steered.yaml").write_text(STEERED, encoding="utf-8")
    return tmp_path / "steered.yaml"


def test_a_spec_file_with_interventions_stores_the_steered_activations(model, batches, spec_file, tmp_path) -> None:
    acts = extract(model, spec_file, batches, tmp_path / "out", progress=False)
    expected = _steered_captures(model, batches)
    assert acts.layers("hidden_states") == list(range(len(expected)))
    for layer, want in enumerate(expected):
        assert torch.equal(acts.get("hidden_states", layer), want), layer


def test_a_spec_document_with_run_time_values(model, batches, tmp_path) -> None:
    acts = extract(model, RUNTIME, batches, tmp_path / "out", progress=False, values={"direction": VECTOR})
    for layer, want in enumerate(_steered_captures(model, batches)):
        assert torch.equal(acts.get("hidden_states", layer), want), layer


def test_other_edit_values_are_another_run(model, batches, tmp_path) -> None:
    extract(model, RUNTIME, batches[:2], tmp_path / "out", progress=False, values={"direction": VECTOR})
    with pytest.raises(yamltrace.YamltraceError, match="another run"):
        extract(model, RUNTIME, batches, tmp_path / "out", progress=False, values={"direction": 2 * VECTOR})


def test_positions_last_steers_each_rows_last_real_token(model, batches, tmp_path) -> None:
    padded = []
    for batch in batches:  # right padding: rows of 6, 4 and 2 real tokens
        mask = torch.zeros_like(batch["attention_mask"])
        for row, length in zip(range(mask.shape[0]), (6, 4, 2)):
            mask[row, :length] = 1
        padded.append({"input_ids": batch["input_ids"], "attention_mask": mask})
    spec = {**RUNTIME, "interventions": {"steer": {**RUNTIME["interventions"]["steer"], "positions": "last"}}}
    acts = extract(model, spec, padded, tmp_path / "out", progress=False, values={"direction": VECTOR})
    seen: dict[str, torch.Tensor] = {}

    def steer(module, args, out):
        out = out.clone()
        for row, real in enumerate(seen["mask"]):
            out[row, int(real.nonzero().max())] += VECTOR
        return out

    handles = [
        model.register_forward_pre_hook(lambda m, a, k: seen.update(mask=k["attention_mask"]), with_kwargs=True),
        model.layers[1].register_forward_hook(steer),
    ]
    try:
        with torch.inference_mode(), yamltrace.trace(model, {"hidden_states": type(model.layers[0])}) as captures:
            for batch in padded:
                model(**batch)
    finally:
        for handle in handles:
            handle.remove()
    steps = [dict(step)["hidden_states"] for step in captures.steps]
    for layer in range(len(steps[0])):
        assert torch.equal(acts.get("hidden_states", layer), torch.cat([step[layer] for step in steps])), layer


def test_a_meta_tensor_value_is_a_located_error_naming_the_spec_file(model, batches, tmp_path) -> None:
    path = tmp_path / "runtime.yaml"
    path.write_text(STEERED.replace('{tensor: "steer.safetensors:v"}', "{value: direction}"), encoding="utf-8")
    meta = torch.zeros(32, device="meta")
    with pytest.raises(
        yamltrace.SpecError,
        match=r"runtime\.yaml:5:\d+: \$\.interventions\.steer: values\['direction'\] is a tensor on the meta device, "
        r"which holds no data",
    ):
        extract(model, path, batches, tmp_path / "out", progress=False, values={"direction": meta})
    assert not (tmp_path / "out" / "index.json").exists()


def test_a_key_that_is_not_a_name_is_a_located_error_naming_the_spec_file(model, batches, tmp_path) -> None:
    path = tmp_path / "runtime.yaml"
    path.write_text(STEERED.replace('{tensor: "steer.safetensors:v"}', "{value: direction}"), encoding="utf-8")
    with pytest.raises(
        yamltrace.SpecError, match=r"runtime\.yaml: \$\.interventions: values= has the key 1 \(int\); its keys are the NAMEs"
    ):
        extract(model, path, batches, tmp_path / "out", progress=False, values={1: VECTOR})


def test_intervene_with_a_key_that_is_not_a_name_is_a_located_error(model, tmp_path) -> None:
    path = tmp_path / "runtime.yaml"
    path.write_text(STEERED.replace('{tensor: "steer.safetensors:v"}', "{value: direction}"), encoding="utf-8")
    with pytest.raises(
        yamltrace.SpecError, match=r"runtime\.yaml: \$\.interventions: values= has the key 1 \(int\); its keys are the NAMEs"
    ):
        with yamltrace.intervene(model, path, values={1: VECTOR}):
            pass
