"""Tuple recorders on transformers' own models: Inkling2Loop (5.24 and later) records hidden states with
a tuple of four layer classes; `spec_from_model` exports it and the spec captures what the model returns."""

from __future__ import annotations

import pytest
import torch

from yamltrace import load_spec, spec_from_model, trace

pytestmark = pytest.mark.oracle

INKLING = "transformers.models.inkling2_loop.modeling_inkling2_loop"


def test_spec_from_model_exports_inkling2_loop_and_captures_what_it_returns() -> None:
    """transformers 5.24's Inkling2Loop records hidden states with a tuple of four layer classes."""
    modeling = pytest.importorskip(INKLING, reason="Inkling2Loop is in transformers 5.24 and later")
    config = modeling.Inkling2LoopTextConfig(
        vocab_size=64, unpadded_vocab_size=64, hidden_size=32, num_hidden_layers=6, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, swa_num_attention_heads=2, swa_num_key_value_heads=1, swa_head_dim=16,
        sliding_window_size=8, d_rel=4, rel_extent=16, moe_intermediate_size=16, n_routed_experts=4,
        num_experts_per_tok=2, n_layers_per_attn_res_block=2, loop_layer_index_start=2, loop_layer_index_end=4,
        loop_num_passes=2, loop_gate_rank=4, layer_types=["hybrid_sliding", "hybrid"] * 3, eos_token_id=None,
    )  # fmt: skip
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = modeling.Inkling2LoopTextModel(config).eval()
    spec = load_spec(spec_from_model(model).to_yaml())
    assert len(spec.outputs["hidden_states"][0].target_classes) == 4
    ids = torch.randint(0, 64, (1, 7))
    with torch.no_grad():
        own = model(ids, output_hidden_states=True, output_attentions=True, output_router_logits=True)
        with trace(model, spec) as captured:
            model(ids)
    for key in ("hidden_states", "attentions", "router_logits"):
        assert len(own[key]) == len(captured[key]) > 0
        assert all(torch.equal(a, b) for a, b in zip(own[key], captured[key])), key
