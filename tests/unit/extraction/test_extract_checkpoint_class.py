"""`extract --checkpoint` builds the class the checkpoint's `config.json` names (as `check --checkpoint` does),
`--model` overrides it; the checkpoint is saved with a shipped spec (`spec="builtin:gpt2"`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers_extract import tiny_tokenizer

import yamltrace
from yamltrace.cli import main
from yamltrace.extraction import open_activations


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny GPT2LMHeadModel saved with the shipped gpt2 spec (which names GPT2LMHeadModel in `model:`)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=128, n_embd=16, n_layer=2, n_head=2, n_positions=32)
    directory = tmp_path_factory.mktemp("gpt2")
    yamltrace.save_pretrained(GPT2LMHeadModel(config).eval(), directory, spec="builtin:gpt2")
    return directory


def test_save_pretrained_writes_a_builtins_text(checkpoint: Path) -> None:
    assert (checkpoint / "yamltrace.yaml").read_bytes() == yamltrace.specs.path("gpt2").read_bytes()
    assert json.loads((checkpoint / "config.json").read_text())["architectures"] == ["GPT2LMHeadModel"]


@pytest.mark.parametrize(
    ("model", "built"),
    [
        ([], "transformers.models.gpt2.modeling_gpt2:GPT2LMHeadModel"),
        (["--model", "transformers:GPT2Model"], "transformers.models.gpt2.modeling_gpt2:GPT2Model"),  # the base model
    ],
    ids=["config.json's class", "--model"],
)
def test_extract_builds_the_checkpoints_class_unless_model_is_given(
    checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], model: list[str], built: str
) -> None:
    data = tmp_path / "data.jsonl"
    data.write_text('{"text": "a b c"}\n{"text": "b c a b"}\n', encoding="utf-8")
    argv = [
        "extract", "--checkpoint", str(checkpoint), *model, "--data", str(data), "--tokenizer", str(tiny_tokenizer(tmp_path / "tok")),
        "--max-length", "4", "--out", str(tmp_path / "out"), "--quiet", "--outputs", "hidden_states",
    ]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    assert open_activations(tmp_path / "out").index["run"]["model"]["class"] == built
