"""Data columns carried beside the activations (`extract(columns=...)`, `--columns`): taken out of the
batch before the forward, stored one value per row (tensors, numbers, text), read back in row order,
resumed byte for byte, and checked when a folder from elsewhere is read."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from helpers import ROOT
from helpers_extract import TEXTS, tiny_tokenizer

from yamltrace.cli import main
from yamltrace.examples.tiny import TinyConfig
from yamltrace.extraction import ExtractError, extract, open_activations

TINY = ROOT / "specs" / "tiny.yaml"
SHARD = 30_000  # two batches of the fixture per shard
COLUMNS = ["labels", "id", "score"]
TEXTS_FIELD = "yamltrace.texts"  # the metadata entry of a shard that holds its text columns (docs/extract.md)


def with_columns(batches: list[dict]) -> list[dict]:
    """The fixture's batches, each row with a label (int), an id (text) and a score (a tensor row)."""
    out, row = [], 0
    for batch in batches:
        rows = batch["input_ids"].shape[0]
        numbers = list(range(row, row + rows))
        out.append({**batch, "labels": [n % 3 for n in numbers], "id": [f"row-{n}" for n in numbers],
                    "score": torch.tensor([[n / 2, -n] for n in numbers])})  # fmt: skip
        row += rows
    return out


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_columns_are_stored_beside_the_captures_and_read_back_in_row_order(model, batches, tmp_path: Path) -> None:
    seen: list[set[str]] = []
    model.register_forward_pre_hook(lambda module, args, kwargs: seen.append(set(kwargs)), with_kwargs=True)
    acts = extract(model, TINY, with_columns(batches), tmp_path, columns=COLUMNS, shard_bytes=SHARD, progress=False)
    assert len(acts.index["shards"]) > 1
    assert seen and all(keys == {"input_ids", "attention_mask"} for keys in seen), "columns are not model inputs"
    assert acts.columns() == COLUMNS and "labels" in acts.keys() and "id" not in acts.keys()
    assert torch.equal(acts.column("labels"), torch.tensor([n % 3 for n in range(20)]))
    assert acts.column("labels").dtype == torch.int64 and acts.layers("labels") is None
    assert acts.column("id") == [f"row-{n}" for n in range(20)]
    assert acts.column("id", rows=slice(5, 8)) == ["row-5", "row-6", "row-7"]  # across a shard boundary
    assert torch.equal(acts.column("score", rows=range(18, 20)), torch.tensor([[9.0, -18.0], [9.5, -19.0]]))
    with pytest.raises(KeyError, match=r"'id' is a column of text, not a tensor: read it with column\('id'\)"):
        acts.get("id")
    with pytest.raises(KeyError, match=r"'label' is not a carried column.*did you mean 'labels'"):
        acts.column("label")
    plain = extract(model, TINY, batches, tmp_path / "plain", shard_bytes=SHARD, progress=False)
    for key in plain.keys():
        assert torch.equal(acts.get(key), plain.get(key)), key


def test_resuming_with_columns_writes_the_same_files(model, batches, tmp_path: Path) -> None:
    source = with_columns(batches)
    extract(model, TINY, source, tmp_path / "whole", columns=COLUMNS, shard_bytes=SHARD, progress=False)

    def crashing():
        for i, batch in enumerate(source):
            if i == 5:
                raise RuntimeError("simulated crash")
            yield batch

    with pytest.raises(RuntimeError, match="simulated crash"):
        extract(model, TINY, crashing(), tmp_path / "crashed", columns=COLUMNS, shard_bytes=SHARD, progress=False)
    extract(model, TINY, source, tmp_path / "crashed", columns=COLUMNS, shard_bytes=SHARD, progress=False)
    assert files(tmp_path / "crashed") == files(tmp_path / "whole")
    with pytest.raises(ExtractError, match="holds shards of another run"):
        extract(model, TINY, source, tmp_path / "crashed", columns=["labels"], shard_bytes=SHARD, progress=False)


@pytest.mark.parametrize(
    ("change", "columns", "message"),
    [
        (lambda b: b.pop("labels"), COLUMNS, r"batch 0: no entry 'labels' \(entries: input_ids, attention_mask, id, score\)"),
        (lambda b: b.update(labels=[1]), COLUMNS, r"batch 0: column 'labels' holds 1 value\(s\) for 3 row\(s\)"),
        (lambda b: b.update(labels=[1, "a", 2]), COLUMNS, r"column 'labels': mixes int, str; one column holds strings only"),
        (lambda b: b.update(labels=[[1], [2, 3], [4]]), COLUMNS, r"column 'labels': cannot make one tensor"),
        (lambda b: b.update(labels=7), COLUMNS, r"column 'labels': 7 \(int\), not a tensor or a list"),
        (lambda b: None, ["input_ids"], r"columns: 'input_ids' is also in inputs"),
        (lambda b: b.update(hidden_states=[0, 1, 2]), ["hidden_states"], r"'hidden_states' is also the name of a captured key"),
        (lambda b: None, ["a/b"], r"columns: 'a/b' is not a column name"),
    ],
)
def test_a_column_that_cannot_be_stored_is_an_error_before_any_shard(
    model, batches, tmp_path: Path, change, columns, message
) -> None:
    source = with_columns(batches)
    change(source[0])
    with pytest.raises(ExtractError, match=message):
        extract(model, TINY, source, tmp_path, columns=columns, progress=False)
    assert not list(tmp_path.glob("shard-*"))


def test_a_later_batch_whose_column_changes_kind_is_an_error(model, batches, tmp_path: Path) -> None:
    source = with_columns(batches)
    source[2]["id"] = [1, 2, 3]
    with pytest.raises(ExtractError, match=r"batch 2: id has rows \[\] \(I64\), but earlier batches had none"):
        extract(model, TINY, source, tmp_path, columns=COLUMNS, progress=False)


def _edit_texts(path: Path, edit) -> None:
    """Rewrite the text columns in the metadata of the safetensors file `path` (tensors kept)."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(str(path), framework="pt") as f:
        metadata, tensors = dict(f.metadata()), {name: f.get_tensor(name) for name in f.keys()}
    texts = json.loads(metadata[TEXTS_FIELD])
    edit(texts)
    metadata[TEXTS_FIELD] = json.dumps(texts)
    save_file(tensors, str(path), metadata=metadata)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda texts: texts["id"].pop(), r"text column 'id' is not 6 string\(s\), one per row of the shard"),
        (lambda texts: texts["id"].__setitem__(0, 5), r"text column 'id' is not 6 string\(s\)"),
        (lambda texts: texts.pop("id"), r"text column 'id' is not 6 string\(s\)"),
    ],
)
def test_a_shard_whose_text_columns_do_not_match_the_index_is_an_error(model, batches, tmp_path: Path, edit, message) -> None:
    extract(model, TINY, with_columns(batches), tmp_path, columns=COLUMNS, shard_bytes=SHARD, progress=False)
    first = sorted(tmp_path.glob("shard-*.safetensors"))[0]
    _edit_texts(first, edit)
    acts = open_activations(tmp_path)
    assert acts.column("id", rows=slice(18, 20)) == ["row-18", "row-19"]  # other shards read as before
    with pytest.raises(ExtractError, match=f"{first}: {message}"):
        acts.column("id")


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ({"labels": 1}, r"\$\.columns: expected a list"),
        (["labels", "labels"], r"\$\.columns: a column is listed twice"),
        (["hidden_states"], r"\$\.columns\[0\]: 'hidden_states' is a captured key with layers"),
        ([7], r"\$\.columns\[0\]: expected a column name"),
    ],
)
def test_an_index_with_bad_columns_is_refused_when_opened(model, batches, tmp_path: Path, columns, message) -> None:
    extract(model, TINY, with_columns(batches), tmp_path, columns=COLUMNS, progress=False)
    index = json.loads((tmp_path / "index.json").read_text())
    index["columns"] = columns
    (tmp_path / "index.json").write_text(json.dumps(index))
    with pytest.raises(ExtractError, match=f"index.json: {message}"):
        open_activations(tmp_path)


def test_the_command_line_carries_the_columns_of_each_row(tmp_path: Path, capsys) -> None:
    config, data = tmp_path / "config.json", tmp_path / "data.jsonl"
    TinyConfig().save(config)
    rows = [{"text": t, "label": i % 2, "id": f"doc-{i}", "tags": [i, i + 1]} for i, t in enumerate(TEXTS)]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    argv = [
        "extract", "--model", "yamltrace.examples.tiny:TinyModel", "--config", str(config), "--spec", str(TINY),
        "--data", str(data), "--tokenizer", str(tiny_tokenizer(tmp_path / "tok")), "--max-length", "6",
        "--batch-size", "3", "--out", str(tmp_path / "out"), "--quiet", "--columns", "label", "id", "--columns", "tags",
    ]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    acts = open_activations(tmp_path / "out")
    assert acts.columns() == ["label", "id", "tags"]
    assert acts.column("label").tolist() == [row["label"] for row in rows]
    assert acts.column("id") == [row["id"] for row in rows]
    assert acts.column("tags").tolist() == [row["tags"] for row in rows]
    data.write_text(data.read_text(encoding="utf-8") + json.dumps({"text": "no label"}) + "\n", encoding="utf-8")
    assert main([*argv[:-5], "--columns", "label"]) == 1
    assert "line 8: no field 'label' (fields: text), which --columns names" in capsys.readouterr().err
    text = tmp_path / "data.txt"
    text.write_text("one\ntwo\n", encoding="utf-8")
    argv[argv.index(str(data))] = str(text)
    assert main(argv) == 1
    assert "a .txt file's rows have no fields for --columns; use .jsonl or .parquet" in capsys.readouterr().err


class _Feature:
    dtype = "string"


class _Dataset:
    """What `yamltrace extract --dataset` reads of a `datasets` dataset: column names, features, rows by index."""

    def __init__(self, rows: list[dict]) -> None:
        self.rows, self.column_names = rows, list(rows[0])
        self.features = {name: _Feature() for name in self.column_names}

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict:
        return self.rows[i]


def test_a_datasets_dataset_carries_its_columns(tmp_path: Path, monkeypatch, capsys) -> None:
    import types

    rows = [{"text": t, "label": i} for i, t in enumerate(TEXTS)]
    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=lambda name, split: _Dataset(rows)))
    config = tmp_path / "config.json"
    TinyConfig().save(config)
    argv = [
        "extract", "--model", "yamltrace.examples.tiny:TinyModel", "--config", str(config), "--spec", str(TINY),
        "--dataset", "tiny", "--split", "train", "--tokenizer", str(tiny_tokenizer(tmp_path / "tok")), "--max-length", "6",
        "--batch-size", "3", "--out", str(tmp_path / "out"), "--quiet",
    ]  # fmt: skip
    assert main([*argv, "--columns", "labels"]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith("no column 'labels', which --columns names (columns: text, label).")
    assert not (tmp_path / "out").exists()
    assert main([*argv, "--columns", "label"]) == 0, capsys.readouterr().err
    acts = open_activations(tmp_path / "out")
    assert acts.index["batches"][2] == [0, 6, 1] and acts.column("label", rows=slice(6, 7)).tolist() == [6]
    assert acts.column("label").tolist() == list(range(len(TEXTS)))
