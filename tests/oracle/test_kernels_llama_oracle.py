"""SdpaLlamaAttention (= SdpaAttention) against transformers' eager LlamaAttention: GQA, padding, KV cache, construction."""

from __future__ import annotations

import pytest
import torch

from yamltrace.kernels import SdpaLlamaAttention
from yamltrace.patch import apply_patches, patch_model

pytestmark = pytest.mark.oracle

TOLERANCE = dict(atol=1e-5, rtol=0)


def llama_config(kv_heads: int = 2):
    from helpers_transformers import tiny_llama_config

    return tiny_llama_config(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_key_value_heads=kv_heads, max_position_embeddings=256
    )


def llama(kv_heads: int = 2):
    from transformers import LlamaModel

    torch.manual_seed(0)
    return LlamaModel(llama_config(kv_heads)).eval()


def ids(batch: int, seq: int) -> torch.Tensor:
    return torch.randint(0, 128, (batch, seq), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_sdpa_llama_equals_eager_llama(kv_heads):
    model = llama(kv_heads)
    inputs = ids(2, 130)
    expected = model(inputs).last_hidden_state
    with patch_model(model, {"LlamaAttention": SdpaLlamaAttention}) as handle:
        assert len(handle.replaced) == 2
        got = model(inputs).last_hidden_state
    torch.testing.assert_close(got, expected, **TOLERANCE)


def test_sdpa_llama_equals_eager_llama_with_padding():
    model = llama()
    inputs = ids(2, 12)
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[0, :4] = 0
    expected = model(inputs, attention_mask=mask).last_hidden_state
    with patch_model(model, {"LlamaAttention": SdpaLlamaAttention}):
        got = model(inputs, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(got[:, 4:], expected[:, 4:], **TOLERANCE)
    torch.testing.assert_close(got[1], expected[1], **TOLERANCE)


def test_sdpa_llama_equals_eager_llama_with_a_cache():
    from transformers import DynamicCache

    model = llama()
    steps = [ids(1, 10), ids(1, 3), ids(1, 1)]
    outputs = []
    for patched in (False, True):
        cache = DynamicCache(config=model.config)
        with patch_model(model, {"LlamaAttention": SdpaLlamaAttention} if patched else {}):
            outputs.append([model(step, past_key_values=cache, use_cache=True).last_hidden_state for step in steps])
    for got, expected in zip(outputs[1], outputs[0]):
        torch.testing.assert_close(got, expected, **TOLERANCE)


def test_sdpa_llama_without_a_mask_is_causal_also_after_a_cache():
    from transformers import DynamicCache
    from transformers.models.llama.modeling_llama import (
        LlamaAttention,
        LlamaRotaryEmbedding,
    )

    config = llama_config()
    torch.manual_seed(0)
    eager = LlamaAttention(config, layer_idx=0).eval()
    sdpa = SdpaLlamaAttention.from_module(eager)
    rotary = LlamaRotaryEmbedding(config)
    hidden = torch.randn(1, 9, 64)
    positions = torch.arange(9)[None]
    cos_sin = rotary(hidden, positions)
    prefix = (cos_sin[0][:, :6], cos_sin[1][:, :6])
    chunk = (cos_sin[0][:, 6:], cos_sin[1][:, 6:])
    caches = [DynamicCache(config=config), DynamicCache(config=config)]
    eager(hidden[:, :6], prefix, torch.zeros(1, 1, 6, 6).masked_fill(torch.ones(6, 6, dtype=torch.bool).triu(1), -1e9), caches[0])
    sdpa(hidden[:, :6], prefix, None, caches[1])
    bottom_right = torch.ones(3, 9, dtype=torch.bool).triu(7)
    expected, _ = eager(hidden[:, 6:], chunk, torch.zeros(1, 1, 3, 9).masked_fill(bottom_right, -1e9), caches[0])
    got, weights = sdpa(hidden[:, 6:], chunk, None, caches[1])
    torch.testing.assert_close(got, expected, **TOLERANCE)
    assert weights is None


def test_llama_built_with_sdpa_under_apply_patches_equals_eager():
    from transformers import LlamaModel

    reference = llama()
    with apply_patches({"LlamaAttention": SdpaLlamaAttention}, modules=[LlamaModel]) as replaced:
        model = LlamaModel(llama_config()).eval()
    assert [r.path for r in replaced] == ["transformers.models.llama.modeling_llama.LlamaAttention"]
    assert all(type(layer.self_attn) is SdpaLlamaAttention for layer in model.layers)
    model.load_state_dict(reference.state_dict())
    inputs = ids(2, 20)
    torch.testing.assert_close(model(inputs).last_hidden_state, reference(inputs).last_hidden_state, **TOLERANCE)
