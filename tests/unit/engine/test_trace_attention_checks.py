"""`trace`'s attention-weight warning (attention weights captured from attention that computes none)
for the spec a loaded model carries, and a kept plan that sees a sub-config's attention
implementation change: each block warns exactly as a block planned from scratch would."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, LlamaModel
from torch import nn

import yamltrace
from yamltrace.engine import forget_plans

ATTENTIONS = {
    "yamltrace": 1,
    "outputs": {"attentions": {"target": "transformers.models.llama.modeling_llama:LlamaAttention", "index": 1}},
}


def tiny_config() -> LlamaConfig:
    return LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1
    )


def ids() -> torch.Tensor:
    return torch.randint(0, 64, (1, 5), generator=torch.Generator().manual_seed(0))


def block_warnings(model: nn.Module, spec: object = None) -> list[str]:
    """The messages of the attention-weight warnings one block on `model` gives."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.no_grad(), yamltrace.trace(model, spec):
            model(ids())
    return [str(w.message) for w in caught if "captures attention weights" in str(w.message)]


def test_the_spec_a_loaded_model_carries_is_checked_at_every_block(tmp_path: Path) -> None:
    LlamaForCausalLM(tiny_config()).save_pretrained(tmp_path)
    model = yamltrace.from_pretrained(LlamaForCausalLM, tmp_path, spec=ATTENTIONS, attn_implementation="sdpa").eval()
    first = block_warnings(model)
    assert len(first) == 1 and "runs attn_implementation 'sdpa', which computes none" in first[0]
    assert block_warnings(model) == first  # the kept plan warns again
    model.set_attn_implementation("eager")
    assert block_warnings(model) == []


class Composite(nn.Module):
    """A model whose language model has a config of its own (a sub-config), as composite models do."""

    def __init__(self) -> None:
        super().__init__()
        self.config = tiny_config()
        self.language_model = LlamaModel(tiny_config())

    def forward(self, input_ids: torch.Tensor) -> object:
        return self.language_model(input_ids=input_ids)


@pytest.mark.parametrize("first, then", [("sdpa", "eager"), ("eager", "sdpa")])
def test_a_sub_configs_attention_implementation_changed_between_blocks_is_seen(first: str, then: str) -> None:
    torch.manual_seed(0)
    model = Composite().eval()
    model.config._attn_implementation = "sdpa"
    spec = {"attentions": yamltrace.OutputRecorder(target_class=type(model.language_model.layers[0].self_attn), index=1)}
    model.language_model.config._attn_implementation = first
    assert bool(block_warnings(model, spec)) == (first == "sdpa")
    model.language_model.config._attn_implementation = then  # the root's config unchanged
    second = block_warnings(model, spec)
    forget_plans(model)
    assert second == block_warnings(model, spec) and bool(second) == (then == "sdpa")


def test_only_the_keys_a_block_records_are_checked() -> None:
    """`outputs=` leaving the attention weights out: nothing to warn about (they are not captured)."""
    model = LlamaModel(tiny_config()).eval()
    model.set_attn_implementation("sdpa")
    spec = {"hidden_states": "transformers.models.llama.modeling_llama:LlamaDecoderLayer", **ATTENTIONS["outputs"]}
    document = {"yamltrace": 1, "outputs": spec}

    def warned(outputs: object) -> list[str]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with torch.no_grad(), yamltrace.trace(model, document, outputs=outputs):
                model(ids())
        return [str(w.message) for w in caught if "captures attention weights" in str(w.message)]

    assert warned("hidden_states") == []
    assert len(warned(None)) == 1
    assert len(warned(["hidden_states", "attentions"])) == 1
