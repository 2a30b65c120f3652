"""Checkpoints that carry their spec, for transformers models (the installed transformers, tiny, in-process)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")
from helpers_transformers import tiny_llama_config  # noqa: E402
from transformers import AutoModel, LlamaModel  # noqa: E402
from transformers import monkey_patching as hf_patching  # noqa: E402
from transformers.models.llama import modeling_llama  # noqa: E402

import yamltrace  # noqa: E402
from yamltrace.errors import SpecError  # noqa: E402
from yamltrace.kernels import SdpaLlamaAttention  # noqa: E402
from yamltrace.patch import get_patch_mapping  # noqa: E402
from yamltrace.checkpoint import SPEC_FILE, from_pretrained, save_pretrained  # noqa: E402

pytestmark = pytest.mark.oracle

ORIGINAL_ATTENTION = modeling_llama.LlamaAttention

SWAP_SPEC = """\
yamltrace: 1
model: LlamaModel
imports: [transformers.models.llama.modeling_llama]
outputs:
  hidden_states: LlamaDecoderLayer
patches:
  LlamaAttention: yamltrace.kernels:SdpaLlamaAttention
"""


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    config = tiny_llama_config(intermediate_size=64, max_position_embeddings=64)
    directory = tmp_path_factory.mktemp("llama")
    save_pretrained(LlamaModel(config).eval(), directory, spec=yamltrace.spec_from_model(LlamaModel))
    return directory


@pytest.fixture
def input_ids() -> torch.Tensor:
    return torch.randint(0, 99, (2, 9), generator=torch.Generator().manual_seed(3))


def test_save_writes_a_spec_object_with_to_yaml(llama_dir: Path) -> None:
    text = (llama_dir / SPEC_FILE).read_text()
    assert text == yamltrace.spec_from_model(LlamaModel).to_yaml()
    assert "model: LlamaModel" in text
    assert "transformers.models.llama.modeling_llama:LlamaDecoderLayer" in text
    assert (llama_dir / "config.json").is_file()


def test_round_trip_trace_equals_the_models_own_outputs(llama_dir: Path, input_ids) -> None:
    model = from_pretrained(LlamaModel, llama_dir, attn_implementation="eager").eval()
    assert model.yamltrace_spec.model == "LlamaModel"
    own = model(input_ids, output_hidden_states=True, output_attentions=True)
    with yamltrace.trace(model) as captures:
        model(input_ids)
    for key in ("hidden_states", "attentions"):
        assert len(captures[key]) == len(own[key])
        assert all(torch.equal(a, b) for a, b in zip(captures[key], own[key]))


def test_spec_that_swaps_attention_matches_the_plain_load(llama_dir: Path, tmp_path: Path, input_ids) -> None:
    plain = LlamaModel.from_pretrained(llama_dir, attn_implementation="eager").eval()
    before = (modeling_llama.LlamaAttention, get_patch_mapping(), hf_patching.get_patch_mapping())
    swapped = from_pretrained(LlamaModel, llama_dir, spec=SWAP_SPEC, attn_implementation="eager").eval()
    after = (modeling_llama.LlamaAttention, get_patch_mapping(), hf_patching.get_patch_mapping())
    assert before == after
    assert all(type(layer.self_attn) is SdpaLlamaAttention for layer in swapped.layers)
    assert all(type(layer.self_attn) is modeling_llama.LlamaAttention for layer in plain.layers)
    expected = plain(input_ids, output_hidden_states=True)
    with yamltrace.trace(swapped) as captures:
        got = swapped(input_ids)
    torch.testing.assert_close(got.last_hidden_state, expected.last_hidden_state, rtol=0, atol=1e-5)
    assert len(captures["hidden_states"]) == len(expected.hidden_states) == 3
    for a, b in zip(captures["hidden_states"], expected.hidden_states):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def test_auto_class_reads_the_spec_and_applies_patches(llama_dir: Path, input_ids) -> None:
    model = from_pretrained(AutoModel, llama_dir, spec=SWAP_SPEC, attn_implementation="eager")
    assert type(model) is LlamaModel
    assert type(model.layers[0].self_attn) is SdpaLlamaAttention


def test_spec_naming_another_model_fails_before_loading(llama_dir: Path, monkeypatch) -> None:
    loads = []
    monkeypatch.setattr(LlamaModel, "from_pretrained", classmethod(lambda cls, *a, **k: loads.append(a)))
    with pytest.raises(SpecError, match="GPT2Model"):
        from_pretrained(LlamaModel, llama_dir, spec=SWAP_SPEC.replace("model: LlamaModel", "model: GPT2Model"))
    assert loads == []
    assert modeling_llama.LlamaAttention is ORIGINAL_ATTENTION
