"""Specs against the installed transformers: exported maps round-trip, and YAML specs capture what the models return."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
import transformers
from helpers_transformers import tiny_llama_config

import yamltrace
from yamltrace.engine import normalize_output_map
from yamltrace.spec import load_spec, spec_from_model

pytestmark = pytest.mark.oracle

MODELS = ["LlamaModel", "GPT2Model", "BertModel", "CLIPVisionModel", "Qwen2MoeModel"]

LLAMA_SPEC = """\
yamltrace: 1
model: LlamaModel
imports: [transformers.models.llama.modeling_llama]
outputs:
  hidden_states: LlamaDecoderLayer
  attentions: {target: LlamaAttention, index: 1}
"""


@pytest.mark.parametrize("name", MODELS)
def test_exported_maps_round_trip(name: str) -> None:
    cls = getattr(transformers, name)
    spec = spec_from_model(cls)
    exported = [(k, dataclasses.replace(r, optional=False)) for k, rs in spec.outputs.items() for r in rs]
    assert exported == list(normalize_output_map(cls._can_record_outputs))
    # Cross-attention exists only in decoder configurations: exported optional, every other recorder not.
    assert {k for k, rs in spec.outputs.items() for r in rs if r.optional} == (
        {"cross_attentions"} if name in ("GPT2Model", "BertModel") else set()
    )
    loaded = load_spec(spec.to_yaml(), for_model=cls)
    assert loaded == spec
    assert loaded.outputs == spec.outputs


def test_clip_vision_exports_tie_last_off() -> None:
    assert dict(spec_from_model(transformers.CLIPVisionModel).options) == {"tie_last_hidden_states": False}
    assert dict(spec_from_model(transformers.LlamaModel).options) == {}


@pytest.fixture(scope="module")
def llama() -> torch.nn.Module:
    torch.manual_seed(0)
    config = tiny_llama_config(vocab_size=64, intermediate_size=48, num_hidden_layers=3, max_position_embeddings=32)
    return transformers.LlamaModel(config).eval()


@pytest.fixture
def input_ids() -> torch.Tensor:
    return torch.randint(0, 64, (2, 6), generator=torch.Generator().manual_seed(1))


def _assert_equal_tuples(captured: tuple, expected: tuple) -> None:
    assert len(captured) == len(expected) > 0
    assert all(torch.equal(a, b) for a, b in zip(captured, expected))


def test_a_yaml_spec_captures_what_llama_returns(llama: torch.nn.Module, input_ids: torch.Tensor) -> None:
    with torch.no_grad():
        expected = llama(input_ids, output_hidden_states=True, output_attentions=True)
        with yamltrace.trace(llama, load_spec(LLAMA_SPEC, for_model=llama)) as captured:
            llama(input_ids)
    _assert_equal_tuples(captured["hidden_states"], expected.hidden_states)
    _assert_equal_tuples(captured["attentions"], expected.attentions)


def test_trace_loads_a_spec_path(llama: torch.nn.Module, input_ids: torch.Tensor, tmp_path: Path) -> None:
    path = tmp_path / "llama.yaml"
    path.write_text(LLAMA_SPEC)
    with torch.no_grad():
        expected = llama(input_ids, output_hidden_states=True, output_attentions=True)
        with yamltrace.trace(llama, str(path)) as captured:
            llama(input_ids)
    _assert_equal_tuples(captured["hidden_states"], expected.hidden_states)
    _assert_equal_tuples(captured["attentions"], expected.attentions)
