"""`yamltrace extract` against the pieces it is made of: the run records the data file's and the
tokenizer's hashes as those helpers compute them, the rows it stores are those `extract` stores of
the batches its own reader gives, and a writer that fails (a full disk, injected) is one line."""

from __future__ import annotations

from pathlib import Path

import torch
from helpers_extract import SPEC, command

from yamltrace.cli import main
from yamltrace.examples.tiny import TinyConfig, TinyModel
from yamltrace.extraction import extract, open_activations
from yamltrace.extraction._data import TokenizedBatches, file_sha256, load_tokenizer, open_texts, tokenizer_sha256


def test_the_command_stores_what_the_api_stores(inputs, tmp_path: Path, capsys) -> None:
    assert main(command(inputs)) == 0
    out, err = capsys.readouterr()
    assert out == f"wrote 14 rows of hidden_states, attentions, input_ids, attention_mask in 1 shard(s) to {inputs['out']}\n"
    assert "extract: 4/4 batches, 14 rows" in err
    torch.manual_seed(0)
    model = TinyModel(TinyConfig()).eval()
    tokenizer = load_tokenizer(inputs["tokenizer"])
    batches = TokenizedBatches(open_texts(inputs["data"]), tokenizer, batch_size=4, max_length=6)
    expected = extract(model, SPEC, batches, tmp_path / "api", progress=False)
    got = open_activations(inputs["out"])
    assert got.keys() == expected.keys() and len(got) == len(expected) == 14
    for key in got:
        assert torch.equal(got.get(key), expected.get(key)), key
    assert got.index["run"]["data"] == {
        "data": str(inputs["data"]), "bytes": inputs["data"].stat().st_size, "sha256": file_sha256(inputs["data"]),
        "text_field": "text", "tokenizer": str(inputs["tokenizer"]), "tokenizer_sha256": tokenizer_sha256(tokenizer),
        "max_length": 6, "batch_size": 4, "seed": 0,
    }  # fmt: skip


def test_a_full_disk_is_one_line(inputs, capsys, monkeypatch) -> None:
    import yamltrace.extraction._writer as writer_module

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writer_module, "write_safetensors", disk_full)
    assert main(command(inputs, "--quiet")) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(
        f"yamltrace extract: error: writing activation shards to {inputs['out']} failed: No space left on device."
    )
    assert "run the same command again to resume" in line
    assert not any(p.name.endswith(".tmp") for p in inputs["out"].iterdir())
