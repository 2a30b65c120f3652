"""A traced model generates what it generates untraced: `trace` keeps each forward's signature.

transformers' `generate` passes `attention_mask`, `position_ids` and `logits_to_keep` only to a forward
whose signature names them. While a module is intercepted its `forward` must therefore show the
signature of the forward it shadows; with `(*args, **kwargs)`, a left-padded GPT-2 batch got other
position ids under `trace` and generated other tokens.
"""

from __future__ import annotations

import inspect

import pytest
import torch

import yamltrace

transformers = pytest.importorskip("transformers")
from transformers.models.gpt2 import modeling_gpt2  # noqa: E402
from transformers.models.llama import modeling_llama  # noqa: E402


def _gpt2() -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=128, n_embd=64, n_layer=2, n_head=4, pad_token_id=0, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False
    )
    return transformers.GPT2LMHeadModel(config).eval()


def _left_padded() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 128, (2, 6), generator=generator)
    mask = torch.ones_like(ids)
    ids[0, :3], mask[0, :3] = 0, 0
    return ids, mask


@pytest.mark.parametrize(
    "spec",
    [
        {"hidden_states": modeling_gpt2.GPT2Block},
        {"hidden_states": modeling_gpt2.GPT2Block, "logits": modeling_gpt2.GPT2LMHeadModel},
    ],
    ids=["layers", "root-recorded"],
)
def test_generate_under_trace_equals_generate_without(spec: dict) -> None:
    model = _gpt2()
    ids, mask = _left_padded()
    options = dict(attention_mask=mask, max_new_tokens=6, do_sample=False, output_scores=True, return_dict_in_generate=True)
    with torch.no_grad():
        plain = model.generate(ids, **options)
        with yamltrace.trace(model, spec) as captures:
            traced = model.generate(ids, **options)
    assert torch.equal(plain.sequences, traced.sequences)
    assert all(torch.equal(a, b) for a, b in zip(plain.scores, traced.scores))
    assert len(captures.steps) == 6


def test_every_intercepted_forward_shows_its_own_signature() -> None:
    config = transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
    )
    config._attn_implementation = "eager"  # (attention weights are computed)
    model = transformers.LlamaForCausalLM(config).eval()
    modules = {"": model, "model": model.model, "layer": model.model.layers[0], "attention": model.model.layers[0].self_attn}
    before = {name: inspect.signature(module.forward) for name, module in modules.items()}
    spec = {"hidden_states": modeling_llama.LlamaDecoderLayer, "attentions": modeling_llama.LlamaAttention}
    for _ in range(2):
        with yamltrace.trace(model, spec):
            assert all(modules[name]._forward_hooks for name in ("", "layer", "attention"))
            assert {name: inspect.signature(module.forward) for name, module in modules.items()} == before
            model(torch.tensor([[1, 2, 3]]))
    assert all("forward" not in module.__dict__ for module in modules.values())
