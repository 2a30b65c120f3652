"""`yamltrace extract --values FILE.safetensors`: the tensors of the spec's `{value: NAME}` interventions,
end to end on the tiny model: one tensor for all modules, one per module (`NAME.0`, `NAME.1`), the
usage errors, an unsafe file, and resume (the values are part of the run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from helpers_extract import MODEL

from yamltrace.cli import main
from yamltrace.examples.tiny import TinyConfig, TinyModel
from yamltrace.extraction import extract, open_activations

STEERED = """\
yamltrace: 1
imports: [yamltrace.examples.tiny]
outputs: {hidden_states: TinyDecoderLayer}
interventions:
  steer: {target: TinyDecoderLayer, layers: [LAYERS], add: {value: direction}}
"""
VECTOR = torch.linspace(-1.0, 1.0, 32)


def _spec(folder: Path, layers: str = "1") -> Path:
    path = folder / "steered.yaml"
    path.write_text(STEERED.replace("LAYERS", layers), encoding="utf-8")
    return path


def _values(folder: Path, tensors: dict[str, torch.Tensor], name: str = "values.safetensors") -> Path:
    path = folder / name
    save_file({name: tensor.clone() for name, tensor in tensors.items()}, str(path))
    return path


def _argv(inputs: dict[str, Path], spec: Path, *extra: str) -> list[str]:
    return [
        "extract", "--model", MODEL, "--config", str(inputs["config"]), "--spec", str(spec), "--data", str(inputs["data"]),
        "--tokenizer", str(inputs["tokenizer"]), "--max-length", "6", "--batch-size", "4", "--out", str(inputs["out"]),
        "--quiet", *extra,
    ]  # fmt: skip


def _batches(inputs: dict[str, Path]) -> list[dict[str, torch.Tensor]]:
    """The command's batches, tokenised here: 4 texts each, padded and truncated to 6 tokens."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(inputs["tokenizer"]), local_files_only=True)
    lines = inputs["data"].read_text(encoding="utf-8").splitlines()
    texts = [json.loads(line)["text"] for line in lines]
    return [
        dict(tokenizer(texts[i : i + 4], padding="max_length", truncation=True, max_length=6, return_tensors="pt"))
        for i in range(0, len(texts), 4)
    ]


def _api(inputs: dict[str, Path], spec: Path, out: Path, values: dict) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    model = TinyModel(TinyConfig()).eval()
    batches = _batches(inputs)
    acts = extract(model, spec, batches, out, progress=False, values=values)
    return {str(layer): acts.get("hidden_states", layer) for layer in acts.layers("hidden_states")}


def _stored(out: Path) -> dict[str, torch.Tensor]:
    acts = open_activations(out)
    return {str(layer): acts.get("hidden_states", layer) for layer in acts.layers("hidden_states")}


def _same(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert got.keys() == want.keys()
    for layer in got:
        assert torch.equal(got[layer], want[layer]), layer


def test_one_tensor_for_every_module_stores_what_the_api_stores(inputs, tmp_path: Path, capsys) -> None:
    spec = _spec(tmp_path)
    assert main(_argv(inputs, spec, "--values", str(_values(tmp_path, {"direction": VECTOR})))) == 0
    assert capsys.readouterr() == ("", "")
    _same(_stored(inputs["out"]), _api(inputs, spec, tmp_path / "api", {"direction": VECTOR}))


def test_numbered_tensors_are_one_per_module_in_module_order(inputs, tmp_path: Path, capsys) -> None:
    spec = _spec(tmp_path, "0, 2")
    first, second = VECTOR, -2 * VECTOR
    values = _values(tmp_path, {"direction.0": first, "direction.1": second})
    assert main(_argv(inputs, spec, "--values", str(values))) == 0
    _same(_stored(inputs["out"]), _api(inputs, spec, tmp_path / "api", {"direction": [first, second]}))
    swapped = _api(inputs, spec, tmp_path / "swapped", {"direction": [second, first]})
    assert not torch.equal(_stored(inputs["out"])["2"], swapped["2"])


@pytest.mark.parametrize(
    ("tensors", "needles"),
    [
        ({"other": VECTOR}, ["values.safetensors", "no tensor 'direction'", "it holds: other"]),
        ({"direction": VECTOR, "extra": VECTOR}, ["values.safetensors", "tensor 'extra'", "they take: direction"]),
        ({"direction.0": VECTOR, "direction.2": VECTOR}, ["values.safetensors", "direction.1 is missing"]),
        ({"direction": VECTOR, "direction.0": VECTOR}, ["values.safetensors", "both 'direction' and direction.0"]),
        (
            {"direction": VECTOR, "direction." + "1" * 5000: VECTOR},
            ["values.safetensors", "tensor 'direction.111", "they take: direction"],
        ),
    ],
    ids=["missing", "unknown", "gap", "both", "5000 digits"],
)
def test_names_that_do_not_match_the_spec_are_one_line_usage_errors(inputs, tmp_path: Path, capsys, tensors, needles) -> None:
    spec = _spec(tmp_path)
    assert main(_argv(inputs, spec, "--values", str(_values(tmp_path, tensors)))) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("yamltrace extract: error: --values "), err
    for needle in needles:
        assert needle in err, (needle, err)
    assert not inputs["out"].exists()


def test_a_spec_that_takes_values_without_the_option_is_a_usage_error(inputs, tmp_path: Path, capsys) -> None:
    assert main(_argv(inputs, _spec(tmp_path))) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "{value: NAME} for direction: give --values FILE.safetensors" in err


def test_values_for_a_spec_without_them_are_a_usage_error(inputs, tmp_path: Path, capsys) -> None:
    plain = tmp_path / "plain.yaml"
    plain.write_text("yamltrace: 1\nimports: [yamltrace.examples.tiny]\noutputs: {hidden_states: TinyDecoderLayer}\n")
    assert main(_argv(inputs, plain, "--values", str(_values(tmp_path, {"direction": VECTOR})))) == 2
    err = capsys.readouterr().err
    assert "tensor 'direction' is not a {value: NAME}" in err and "they take: no {value: NAME}" in err


def test_a_values_file_linking_out_of_its_folder_is_refused(inputs, tmp_path: Path, capsys) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    folder = tmp_path / "given"
    folder.mkdir()
    (folder / "values.safetensors").symlink_to(_values(elsewhere, {"direction": VECTOR}))
    assert main(_argv(inputs, _spec(tmp_path), "--values", str(folder / "values.safetensors"))) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "values file" in err and not inputs["out"].exists()


def test_a_values_file_that_is_not_safetensors_is_one_line(inputs, tmp_path: Path, capsys) -> None:
    bad = tmp_path / "values.safetensors"
    bad.write_bytes(b"\x80\x03}q\x00.")  # a pickle, never unpickled
    assert main(_argv(inputs, _spec(tmp_path), "--values", str(bad))) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "not a safetensors file" in err


def test_resume_continues_with_the_same_values_and_refuses_others(inputs, tmp_path: Path, capsys) -> None:
    spec = _spec(tmp_path)
    values = _values(tmp_path, {"direction": VECTOR})
    assert main(_argv(inputs, spec, "--values", str(values))) == 0
    before = _stored(inputs["out"])
    assert main(_argv(inputs, spec, "--values", str(values))) == 0
    _same(_stored(inputs["out"]), before)
    _values(tmp_path, {"direction": 2 * VECTOR})  # the same file name, other tensors
    assert main(_argv(inputs, spec, "--values", str(values))) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "holds shards of another run" in err
