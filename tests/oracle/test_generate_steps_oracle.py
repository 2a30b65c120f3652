"""`Captures.cat_steps` over a transformers `generate` call: the prefill step (the prompt) and each cached
decode step (one token) join, per layer, into the states a single forward over the whole sequence gives."""

from __future__ import annotations

import torch
from helpers_transformers import tiny_llama_config
from transformers import LlamaForCausalLM

from yamltrace.tracing import trace

PROMPT, NEW_TOKENS = 5, 4


def test_generate_steps_join_into_the_full_forwards_states() -> None:
    torch.manual_seed(0)
    model = LlamaForCausalLM(tiny_llama_config(tie_word_embeddings=False)).eval()
    prompt = torch.randint(0, model.config.vocab_size, (2, PROMPT), generator=torch.Generator().manual_seed(3))
    settings = dict(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)
    with torch.no_grad(), trace(model, "builtin:llama", outputs=["hidden_states", "attention_heads", "mlp_outputs"]) as cap:
        sequences = model.generate(prompt, **settings)
    assert len(cap.steps) == NEW_TOKENS  # the prefill, then one decode step per token but the last
    assert [step["hidden_states"][0].shape[1] for step in cap.steps] == [PROMPT, 1, 1, 1]
    with torch.no_grad():
        full = model(sequences[:, :-1], output_hidden_states=True)
    joined = cap.cat_steps("hidden_states")
    assert len(joined) == len(full.hidden_states) == model.config.num_hidden_layers + 1
    for got, expected in zip(joined, full.hidden_states):
        assert got.shape == expected.shape == (2, PROMPT + NEW_TOKENS - 1, 32)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    for key in ("attention_heads", "mlp_outputs"):
        assert [value.shape[1] for value in cap.cat_steps(key)] == [PROMPT + NEW_TOKENS - 1] * model.config.num_hidden_layers
