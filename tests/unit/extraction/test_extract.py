"""`extract` then `open_activations`: the stored rows are the `trace` captures of the same batches."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn
from helpers import ROOT
from safetensors.torch import load_file

import yamltrace
from yamltrace import OutputRecorder
from yamltrace.examples.tiny import TinyAttention, TinyDecoderLayer, TinyMLP
from yamltrace.extraction import ExtractError, extract, open_activations

TINY = ROOT / "specs" / "tiny.yaml"


def traced(model, spec, batches, outputs=None) -> list[dict[str, tuple]]:
    """Per batch, what `trace` captures in memory for it."""
    with torch.inference_mode(), yamltrace.trace(model, spec, outputs=outputs) as captures:
        for batch in batches:
            model(**batch)
    return [dict(step) for step in captures.steps]


def test_every_layer_of_every_key_equals_the_in_memory_captures(model, batches, tmp_path: Path) -> None:
    acts = extract(model, TINY, batches, tmp_path, shard_bytes=20_000, progress=False)
    steps = traced(model, TINY, batches)
    assert len(acts) == sum(b["input_ids"].shape[0] for b in batches) == 20
    assert acts.keys() == ["hidden_states", "attentions", "input_ids", "attention_mask"]
    assert acts.layers("hidden_states") == [0, 1, 2, 3, 4] and acts.layers("attentions") == [0, 1, 2, 3]
    assert len(acts.index["shards"]) > 1, "the shard size should split this run"
    for key in ("hidden_states", "attentions"):
        for layer in acts.layers(key):
            expected = torch.cat([step[key][layer] for step in steps])
            assert torch.equal(acts.get(key, layer), expected), (key, layer)
            assert acts.shape(key) == expected.shape and acts.dtype(key) == expected.dtype
    for name in ("input_ids", "attention_mask"):
        assert acts.layers(name) is None
        assert torch.equal(acts.get(name), torch.cat([b[name] for b in batches]))


def test_row_ranges_across_shards_and_stacked_layers(model, batches, tmp_path: Path) -> None:
    acts = extract(model, TINY, batches, tmp_path, shard_bytes=20_000, progress=False)
    full = acts.get("hidden_states")
    assert full.shape == (5, 20, 6, 32)
    for rows in (slice(0, 20), slice(2, 11), slice(5, 6), slice(-4, None), range(7, 19), slice(3, 3)):
        assert torch.equal(acts.get("hidden_states", 2, rows), full[2][rows if isinstance(rows, slice) else slice(7, 19)])
    assert torch.equal(acts.get("hidden_states", rows=slice(4, 9)), full[:, 4:9])


def test_layers_dtype_and_outputs_select_what_is_stored(model, batches, tmp_path: Path) -> None:
    spec = {
        "hidden_states": OutputRecorder(TinyDecoderLayer, index=0, layers=(0, -1), dtype="float16"),
        "attentions": OutputRecorder(TinyAttention, index=1),
        "mlp": OutputRecorder(TinyMLP, index=0, layers=(1,), dtype="bfloat16"),
    }
    acts = extract(model, spec, batches, tmp_path, outputs=["hidden_states", "mlp"], progress=False)
    steps = traced(model, spec, batches, outputs=["hidden_states", "mlp"])
    assert acts.keys() == ["hidden_states", "mlp", "input_ids", "attention_mask"]
    assert acts.layers("hidden_states") == [0, 4] and acts.layers("mlp") == [1]
    assert acts.dtype("hidden_states") == torch.float16 and acts.dtype("mlp") == torch.bfloat16
    for key, layer in (("hidden_states", 0), ("hidden_states", 4), ("mlp", 1)):
        assert torch.equal(acts.get(key, layer), torch.cat([s[key][layer] for s in steps]))
    with pytest.raises(KeyError, match=r"layer 2 of 'hidden_states' was not extracted; layers kept: \[0, 4\]"):
        acts.get("hidden_states", 2)
    with pytest.raises(KeyError, match="'attentions' was not extracted"):
        acts.get("attentions", 0)


def test_shards_are_plain_safetensors_files(model, batches, tmp_path: Path) -> None:
    spec = {"hidden_states": OutputRecorder(TinyDecoderLayer, index=0, layers=(-1,), dtype="bfloat16")}
    acts = extract(model, spec, batches, tmp_path, shard_bytes=1_000, progress=False)
    pieces = [load_file(str(tmp_path / shard["file"])) for shard in acts.index["shards"]]
    assert torch.equal(torch.cat([p["hidden_states/4"] for p in pieces]), acts.get("hidden_states", 4))
    assert [p["input_ids"].shape[0] for p in pieces] == [s["rows"] for s in acts.index["shards"]]


def test_the_index_records_the_run(model, batches, tmp_path: Path) -> None:
    extract(model, TINY, batches, tmp_path, progress=False)
    index = json.loads((tmp_path / "index.json").read_text())
    assert index["rows"] == 20 and index["keys"]["hidden_states"] == {
        "layers": [0, 1, 2, 3, 4],
        "row_shape": [6, 32],
        "dtype": "F32",
    }
    assert index["shards"] == [{"file": "shard-r000-00000.safetensors", "rows": 20}]
    assert index["batches"] == [[0, 3 * i, 3] for i in range(6)] + [[0, 18, 2]]
    run = index["run"]
    assert run["model"]["class"] == "yamltrace.examples.tiny:TinyModel" and len(run["model"]["config_sha256"]) == 64
    assert "TinyDecoderLayer" in run["spec"] and run["world_size"] == 1
    assert index["versions"] == {"yamltrace": yamltrace.__version__, "torch": torch.__version__}


def test_no_spec_uses_the_models_own_map(model, batches, tmp_path: Path) -> None:
    acts = extract(model, None, batches[:2], tmp_path, progress=False)
    steps = traced(model, None, batches[:2])
    assert torch.equal(acts.get("attentions", 3), torch.cat([s["attentions"][3] for s in steps]))


def test_tensor_and_tuple_batches(model, batches, tmp_path: Path) -> None:
    ids = [b["input_ids"] for b in batches[:3]]
    as_tensors = extract(model, TINY, ids, tmp_path / "tensors", progress=False)
    as_tuples = extract(model, TINY, [(i,) for i in ids], tmp_path / "tuples", progress=False)
    assert as_tensors.keys() == as_tuples.keys() == ["hidden_states", "attentions"]
    assert torch.equal(as_tensors.get("hidden_states"), as_tuples.get("hidden_states"))


def test_an_unknown_key_fails_before_any_shard_is_written(model, batches, tmp_path: Path) -> None:
    with pytest.raises(KeyError, match="'hidden_state' is not in the spec.*did you mean 'hidden_states'"):
        extract(model, TINY, batches, tmp_path, outputs=["hidden_state"], progress=False)
    assert list(tmp_path.iterdir()) == []


def test_no_batches_is_an_error(model, tmp_path: Path) -> None:
    with pytest.raises(ExtractError, match="holds no batches"):
        extract(model, TINY, iter([]), tmp_path, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_rows_of_another_shape_are_an_error_naming_the_batch(model, batches, tmp_path: Path) -> None:
    longer = {"input_ids": torch.zeros(3, 9, dtype=torch.long), "attention_mask": torch.ones(3, 9, dtype=torch.long)}
    with pytest.raises(
        ExtractError, match=r"batch 2: hidden_states/0 has rows \[9, 32\] \(F32\), but earlier batches had \[6, 32\].*pad"
    ):
        extract(model, TINY, [*batches[:2], longer], tmp_path, progress=False)
    assert not (tmp_path / "index.json").exists()


class Pool(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(0)


class Pooled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pool = Pool()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def test_a_capture_without_one_row_per_batch_row_is_an_error(tmp_path: Path) -> None:
    spec = {"pooled": OutputRecorder(Pool, index=0)}
    with pytest.raises(ExtractError, match=r"batch 0: pooled/0 is shape \[5\], not a tensor with one row per batch row \(3\)"):
        extract(Pooled(), spec, [torch.ones(3, 5)], tmp_path, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_opening_an_unfinished_directory_says_so(model, batches, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="is not a finished yamltrace extraction"):
        open_activations(tmp_path)


def test_the_public_names_are_the_functions() -> None:
    import yamltrace.extraction

    assert yamltrace.extract is extract and yamltrace.open_activations is open_activations
    assert yamltrace.extraction.extract is extract


def test_model_calls_made_while_the_input_gives_a_batch_are_not_stored(model, batches, tmp_path: Path) -> None:
    def batches_that_call_the_model():
        for batch in batches:
            model(input_ids=batch["input_ids"][:1, :2])  # say, a filter run on the side: not this batch's
            yield batch

    acts = extract(model, TINY, batches_that_call_the_model(), tmp_path, progress=False)
    steps = traced(model, TINY, batches)
    for key in ("hidden_states", "attentions"):
        for layer in acts.layers(key):
            assert torch.equal(acts.get(key, layer), torch.cat([step[key][layer] for step in steps])), (key, layer)
