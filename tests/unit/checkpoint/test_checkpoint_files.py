"""What a checkpoint folder holds: the spec saved as written, safetensors (single and sharded) and
`pytorch_model.bin` read without running pickled code, tied weights stored once."""

from __future__ import annotations

import json
import logging
import pickle
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from yamltrace.checkpoint import SPEC_FILE, from_pretrained, save_pretrained
from yamltrace.errors import SpecError
from yamltrace.examples.tiny import TinyConfig, TinyModel
from yamltrace.spec import load_spec, spec_from_model

WRITTEN = """\
# yaml-language-server: $schema=../schemas/yamltrace-spec-v1.schema.json
yamltrace: 1
model: TinyModel            # checked against the class at load time
imports: [yamltrace.examples.tiny]
outputs: {hidden_states: TinyDecoderLayer, mlp: {target: TinyMLP, index: 0, layers: [0, -1]}}
"""


def _files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


# The spec as written


@pytest.mark.parametrize("form", ["path", "path text", "text", "bytes"])
def test_a_spec_file_or_text_is_copied_byte_for_byte(tiny: TinyModel, tmp_path: Path, form: str) -> None:
    source = tmp_path / "tiny.yaml"
    source.write_bytes(WRITTEN.encode())
    spec = {"path": source, "path text": str(source), "text": WRITTEN, "bytes": WRITTEN.encode()}[form]
    save_pretrained(tiny, tmp_path / "ckpt", spec=spec)
    assert (tmp_path / "ckpt" / SPEC_FILE).read_bytes() == WRITTEN.encode()
    loaded = TinyModel.from_pretrained(tmp_path / "ckpt")
    assert loaded.yamltrace_spec == load_spec(WRITTEN)


@pytest.mark.parametrize("form", ["Spec", "mapping"])
def test_a_spec_object_or_mapping_is_rendered_with_to_yaml(tiny: TinyModel, tmp_path: Path, form: str) -> None:
    spec = (
        spec_from_model(TinyModel) if form == "Spec" else {"yamltrace": 1, "outputs": {"mlp": "yamltrace.examples.tiny:TinyMLP"}}
    )
    save_pretrained(tiny, tmp_path / "ckpt", spec=spec)
    expected = load_spec(spec).to_yaml()
    assert (tmp_path / "ckpt" / SPEC_FILE).read_text() == expected


def test_a_spec_that_extends_a_base_is_saved_merged_so_the_checkpoint_stands_alone(tiny: TinyModel, tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text(
        "yamltrace: 1\nimports: [yamltrace.examples.tiny]\noutputs:\n  hidden_states: TinyDecoderLayer\n"
    )
    (tmp_path / "child.yaml").write_text("yamltrace: 1\nextends: base.yaml\noutputs:\n  attentions: TinyAttention\n")
    save_pretrained(tiny, tmp_path / "ckpt", spec=tmp_path / "child.yaml")
    written = (tmp_path / "ckpt" / SPEC_FILE).read_text()
    assert "extends" not in written
    assert load_spec(written) == load_spec(tmp_path / "child.yaml")


def test_no_spec_file_unless_one_is_given_or_attached(tiny: TinyModel, tmp_path: Path) -> None:
    save_pretrained(tiny, tmp_path / "plain")
    assert _files(tmp_path / "plain") == ["config.json", "model.safetensors"]
    assert not hasattr(TinyModel.from_pretrained(tmp_path / "plain"), "yamltrace_spec")


def test_an_attached_spec_is_saved_again(tiny: TinyModel, tmp_path: Path) -> None:
    save_pretrained(tiny, tmp_path / "first", spec=WRITTEN)
    loaded = TinyModel.from_pretrained(tmp_path / "first")
    save_pretrained(loaded, tmp_path / "second")
    assert (tmp_path / "second" / SPEC_FILE).read_text() == loaded.yamltrace_spec.to_yaml()
    assert TinyModel.from_pretrained(tmp_path / "second").yamltrace_spec == loaded.yamltrace_spec


def test_saving_without_a_spec_over_an_old_checkpoint_removes_its_spec(tiny, tmp_path, caplog) -> None:
    save_pretrained(tiny, tmp_path / "ckpt", spec=WRITTEN)
    with caplog.at_level(logging.INFO, logger="yamltrace.checkpoint"):
        save_pretrained(tiny, tmp_path / "ckpt")
    assert SPEC_FILE not in _files(tmp_path / "ckpt")
    assert f"Removed {tmp_path / 'ckpt' / SPEC_FILE}: the saved model has no spec (pass spec= to save one)." in caplog.messages


def test_an_invalid_spec_writes_nothing(tiny: TinyModel, tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"<string>:3:18: \$\.outputs\.hidden_states: give exactly one of 'target'"):
        save_pretrained(tiny, tmp_path / "ckpt", spec="yamltrace: 1\noutputs:\n  hidden_states: {index: 0}\n")
    assert _files(tmp_path / "ckpt") == []


# Weights


def test_weights_are_safetensors(tiny: TinyModel, tmp_path: Path) -> None:
    save_pretrained(tiny, tmp_path / "ckpt")
    stored = load_file(str(tmp_path / "ckpt" / "model.safetensors"))
    assert stored.keys() == tiny.state_dict().keys()
    assert all(torch.equal(stored[k], v) for k, v in tiny.state_dict().items())


def _shard(state: dict[str, torch.Tensor], directory: Path) -> dict[str, str]:
    """Split `state` into two safetensors shards with an index, as transformers writes them."""
    names = sorted(state)
    weight_map = {name: f"model-0000{1 + (i >= len(names) // 2)}-of-00002.safetensors" for i, name in enumerate(names)}
    for shard in set(weight_map.values()):
        save_file({n: state[n].contiguous() for n, s in weight_map.items() if s == shard}, str(directory / shard))
    (directory / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return weight_map


def test_a_sharded_safetensors_checkpoint_loads(tiny: TinyModel, tmp_path: Path, input_ids: torch.Tensor) -> None:
    save_pretrained(tiny, tmp_path / "ckpt", spec=WRITTEN)
    (tmp_path / "ckpt" / "model.safetensors").unlink()
    _shard(tiny.state_dict(), tmp_path / "ckpt")
    loaded = TinyModel.from_pretrained(tmp_path / "ckpt")
    assert torch.equal(loaded(input_ids).last_hidden_state, tiny(input_ids).last_hidden_state)
    assert loaded.yamltrace_spec == load_spec(WRITTEN)


def test_a_shard_missing_a_tensor_its_index_lists_is_named(tiny: TinyModel, tmp_path: Path) -> None:
    save_pretrained(tiny, tmp_path / "ckpt")
    (tmp_path / "ckpt" / "model.safetensors").unlink()
    weight_map = _shard(tiny.state_dict(), tmp_path / "ckpt")
    shard = weight_map["norm.weight"]
    tensors = load_file(str(tmp_path / "ckpt" / shard))
    del tensors["norm.weight"]
    save_file(tensors, str(tmp_path / "ckpt" / shard))
    with pytest.raises(
        ValueError, match=rf"model\.safetensors\.index\.json: {shard} lacks \['norm\.weight'\], which the index places there\."
    ):
        TinyModel.from_pretrained(tmp_path / "ckpt")


def test_a_shard_outside_the_folder_is_refused(tiny: TinyModel, tmp_path: Path) -> None:
    save_pretrained(tiny, tmp_path / "ckpt")
    (tmp_path / "ckpt" / "model.safetensors").rename(tmp_path / "elsewhere.safetensors")
    index = {"weight_map": {name: "../elsewhere.safetensors" for name in tiny.state_dict()}}
    (tmp_path / "ckpt" / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError, match=r"shard '\.\./elsewhere\.safetensors' is not a bare file name"):
        TinyModel.from_pretrained(tmp_path / "ckpt")


class Payload:
    """Unpickling this would call print: `weights_only=True` must refuse it."""

    def __reduce__(self):
        return (print, ("pickled code ran",))


def test_pytorch_model_bin_is_read_without_running_pickled_code(tiny, tmp_path, capsys) -> None:
    save_pretrained(tiny, tmp_path / "ckpt")
    (tmp_path / "ckpt" / "model.safetensors").unlink()
    with open(tmp_path / "ckpt" / "pytorch_model.bin", "wb") as f:
        pickle.dump({"norm.weight": Payload()}, f, protocol=2)
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        TinyModel.from_pretrained(tmp_path / "ckpt")
    assert "pickled code ran" not in capsys.readouterr().out


class TiedTiny(TinyModel):
    """TinyModel with an output head tied to its embeddings: one tensor under two names."""

    def __init__(self, config: TinyConfig) -> None:
        super().__init__(config)
        self.head = torch.nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.head.weight = self.embed_tokens.weight


def test_tied_weights_are_stored_once_and_load_into_both_names(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = TiedTiny(TinyConfig())
    save_pretrained(model, tmp_path / "ckpt")
    stored = load_file(str(tmp_path / "ckpt" / "model.safetensors"))
    assert len(stored) == len(model.state_dict()) - 1
    loaded = from_pretrained(TiedTiny, tmp_path / "ckpt")
    assert loaded.head.weight is loaded.embed_tokens.weight
    assert torch.equal(loaded.head.weight, model.embed_tokens.weight)
