"""A spec's `options: {attn_implementation: eager}`: from_pretrained builds a transformers model with it,
a caller's contradicting argument is an error, and trace warns (located) when the model computes no weights."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import yamltrace
import yamltrace.specs
import yamltrace.tracing
from yamltrace import SpecError

LLAMA = "builtin:llama"


def tiny_config() -> LlamaConfig:
    """A tiny LlamaConfig as transformers builds it by default: its attention is SDPA."""
    return LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1
    )


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("llama")
    LlamaForCausalLM(tiny_config()).save_pretrained(folder)
    return folder


def ids() -> torch.Tensor:
    return torch.randint(0, 64, (1, 5), generator=torch.Generator().manual_seed(0))


def test_the_shipped_llama_spec_states_eager_attention() -> None:
    assert yamltrace.load_spec(LLAMA).options["attn_implementation"] == "eager"


def test_from_pretrained_builds_the_attention_the_spec_states(checkpoint: Path) -> None:
    model = yamltrace.from_pretrained(LlamaForCausalLM, checkpoint, spec=LLAMA).eval()
    assert model.config._attn_implementation == "eager"
    with torch.no_grad(), yamltrace.trace(model) as captures:
        model(ids())
    assert len(captures["attentions"]) == 2
    assert captures["attentions"][0].shape == (1, 2, 5, 5)


def test_a_contradicting_argument_is_a_located_error(checkpoint: Path) -> None:
    with pytest.raises(
        SpecError,
        match=r"llama\.yaml: \$\.options\.attn_implementation: the spec needs attn_implementation 'eager'.*"
        r"given attn_implementation='sdpa'.*overrides=",
    ):
        yamltrace.from_pretrained(LlamaForCausalLM, checkpoint, spec=LLAMA, attn_implementation="sdpa")


def test_the_same_argument_and_an_override_of_the_option_are_accepted(checkpoint: Path, tmp_path: Path) -> None:
    same = yamltrace.from_pretrained(LlamaForCausalLM, checkpoint, spec=LLAMA, attn_implementation="eager")
    assert same.config._attn_implementation == "eager"
    folder = tmp_path / "with-spec"
    LlamaForCausalLM(tiny_config()).save_pretrained(folder)
    (folder / "yamltrace.yaml").write_text(yamltrace.specs.path("llama").read_text(encoding="utf-8"), encoding="utf-8")
    assert yamltrace.from_pretrained(LlamaForCausalLM, folder).config._attn_implementation == "eager"
    overridden = yamltrace.from_pretrained(
        LlamaForCausalLM, folder, overrides={"options": {"attn_implementation": "sdpa"}}, attn_implementation="sdpa"
    )
    assert overridden.config._attn_implementation == "sdpa"


def test_a_spec_without_the_option_keeps_the_callers_choice(checkpoint: Path) -> None:
    spec = {"yamltrace": 1, "outputs": {"hidden_states": "transformers.models.llama.modeling_llama:LlamaDecoderLayer"}}
    model = yamltrace.from_pretrained(LlamaForCausalLM, checkpoint, spec=spec, attn_implementation="eager")
    assert model.config._attn_implementation == "eager"


def test_trace_warns_located_before_the_block_when_attention_computes_no_weights() -> None:
    model = LlamaForCausalLM(tiny_config()).eval()
    assert model.config._attn_implementation == "sdpa"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.no_grad(), yamltrace.trace(model, LLAMA):
            assert len(caught) == 1  # before any forward
            model(ids())
    assert len(caught) == 1, [str(w.message) for w in caught]  # not again after the block
    message = str(caught[0].message)
    assert caught[0].filename == __file__
    assert "llama.yaml:14:15: $.outputs.attentions: output 'attentions' captures attention weights" in message
    assert "LlamaAttention at model.layers.0.self_attn runs attn_implementation 'sdpa', which computes none" in message
    assert "but this model was built with 'sdpa'" in message and 'model.set_attn_implementation("eager")' in message


def test_trace_on_an_eager_model_does_not_warn() -> None:
    model = LlamaForCausalLM(tiny_config()).eval()
    model.set_attn_implementation("eager")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with torch.no_grad(), yamltrace.trace(model, LLAMA) as captures:
            model(ids())
    assert len(captures["attentions"]) == 2


def test_a_spec_without_the_option_is_told_to_state_it() -> None:
    model = LlamaForCausalLM(tiny_config()).eval()
    spec = {"attentions": yamltrace.OutputRecorder(target_class=type(model.model.layers[0].self_attn), index=1)}
    with pytest.warns(UserWarning, match=r"add `options: \{attn_implementation: eager\}` to the spec"):
        yamltrace.tracing.plan(model, spec)
