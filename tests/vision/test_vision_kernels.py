"""The shipped replacements for timm's and diffusers' attention: same state, same outputs, probabilities
that recorders capture and interventions edit, refusals that say why."""

from __future__ import annotations

import pytest
import torch
import vision_models as vm
from diffusers.models.attention_processor import Attention, AttnAddedKVProcessor

import yamltrace
from yamltrace.kernels import AttentionProbabilities, DiffusersEagerAttention, TimmEagerAttention, UnsupportedModuleError

EAGER = {"^Attention$": DiffusersEagerAttention}


def _pair(**kwargs: object) -> tuple[Attention, DiffusersEagerAttention]:
    torch.manual_seed(0)
    original = Attention(**kwargs).eval()  # type: ignore[arg-type]
    return original, DiffusersEagerAttention.from_module(original).eval()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"query_dim": 16, "heads": 4, "dim_head": 4},
        {"query_dim": 16, "cross_attention_dim": 12, "heads": 2, "dim_head": 8, "upcast_attention": True},
        {
            "query_dim": 16,
            "heads": 4,
            "dim_head": 4,
            "norm_num_groups": 4,
            "residual_connection": True,
            "rescale_output_factor": 2.0,
        },
        {"query_dim": 16, "heads": 4, "dim_head": 4, "qk_norm": "layer_norm", "cross_attention_norm": "layer_norm"},
    ],
    ids=["self", "cross-upcast", "groupnorm-residual-4d", "qk-norm-cross-norm"],
)
def test_diffusers_eager_attention_equals_the_default_processor(kwargs: dict[str, object]) -> None:
    original, eager = _pair(**kwargs)
    four_d = "norm_num_groups" in kwargs
    x = torch.randn(2, 16, 4, 4) if four_d else torch.randn(2, 9, 16)
    context = torch.randn(2, 5, 12 if "cross_attention_dim" in kwargs else 16)
    mask = torch.zeros(2, 1, 5).masked_fill(torch.tensor([False, False, False, True, True]), -10000.0)
    calls = [{}] if four_d else [{"encoder_hidden_states": context}, {"encoder_hidden_states": context, "attention_mask": mask}]
    if "cross_attention_dim" not in kwargs and not four_d:
        calls.append({})  # self-attention
    for call in calls:
        expected = original(x, **call)
        torch.testing.assert_close(eager(x, **call), expected, rtol=1e-5, atol=1e-6)
    assert list(eager.state_dict()) == list(original.state_dict())  # checkpoints load by name


def test_diffusers_eager_attention_gradients_equal_the_original() -> None:
    original, eager = _pair(query_dim=16, cross_attention_dim=12, heads=2, dim_head=8)
    x, context = torch.randn(2, 9, 16, requires_grad=True), torch.randn(2, 5, 12)
    original(x, encoder_hidden_states=context).square().sum().backward()
    expected = [x.grad.clone(), *(p.grad.clone() for p in original.parameters())]  # type: ignore[union-attr]
    x.grad = None
    for p in original.parameters():  # shared with `eager`
        p.grad = None
    eager(x, encoder_hidden_states=context).square().sum().backward()
    for a, b in zip([x.grad, *(p.grad for p in eager.parameters())], expected):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_unsupported_attention_is_refused_naming_the_setting() -> None:
    added = Attention(query_dim=16, heads=2, dim_head=8, added_kv_proj_dim=12, processor=AttnAddedKVProcessor())
    with pytest.raises(UnsupportedModuleError, match=r"added_kv_proj_dim=12 \(added key/value projections\)"):
        DiffusersEagerAttention.from_module(added)
    with pytest.raises(UnsupportedModuleError, match=r"added_kv_proj_dim=12"):
        DiffusersEagerAttention(query_dim=16, heads=2, dim_head=8, added_kv_proj_dim=12)
    other = Attention(query_dim=16, heads=2, dim_head=8)
    other.set_processor(AttnAddedKVProcessor())
    with pytest.raises(UnsupportedModuleError, match=r"its processor AttnAddedKVProcessor"):
        DiffusersEagerAttention.from_module(other)


def test_a_processor_set_after_the_patch_is_not_bypassed_silently() -> None:
    _, eager = _pair(query_dim=16, heads=4, dim_head=4)
    eager.set_processor(AttnAddedKVProcessor())
    with pytest.raises(RuntimeError, match=r"processor was set to AttnAddedKVProcessor.*Undo the patch"):
        eager(torch.randn(1, 3, 16))


def test_ablating_a_token_s_cross_attention_through_an_intervention() -> None:
    """`zero` on the key dimension of attn2's probabilities: that text token weighs nothing in any layer."""
    model, inputs = vm.unet(), vm.unet_inputs()
    spec = {
        "yamltrace": 1,
        "imports": ["yamltrace.kernels"],
        "outputs": {"cross_attentions": {"target": "AttentionProbabilities", "layer_name": "attn2", "index": 0}},
        "interventions": {
            "ablate": {"target": "AttentionProbabilities", "layer_name": "attn2", "seq_dim": 3, "positions": [2], "zero": True}
        },
    }
    with yamltrace.patch_model(model, EAGER), torch.no_grad():
        clean = model(**inputs).sample
        with yamltrace.trace(model, spec) as captures:
            ablated = model(**inputs).sample

        # The same edit by a plain torch hook on each attn2.attn_probs:
        def zero_token(module: torch.nn.Module, args: tuple[torch.Tensor], output: torch.Tensor) -> torch.Tensor:
            edited = output.clone()
            edited[..., 2] = 0
            return edited

        handles = [m.register_forward_hook(zero_token) for p, m in model.named_modules() if p.endswith("attn2.attn_probs")]
        try:
            by_hand = model(**inputs).sample
        finally:
            for h in handles:
                h.remove()
    assert all(torch.equal(p[..., 2], torch.zeros_like(p[..., 2])) for p in captures["cross_attentions"])
    assert not torch.allclose(ablated, clean)
    torch.testing.assert_close(ablated, by_hand, rtol=0, atol=0)


def test_timm_eager_attention_shares_state_and_matches_the_fused_path() -> None:
    model = vm.vit()
    original = model.blocks[0].attn
    eager = TimmEagerAttention.from_module(original)
    assert not eager.fused_attn and original.fused_attn
    assert all(a is b for a, b in zip(eager.parameters(), original.parameters()))
    x = torch.randn(2, 17, 192)
    torch.testing.assert_close(eager(x), original(x), rtol=1e-5, atol=1e-6)
    with pytest.raises(UnsupportedModuleError, match=r"replaces timm.layers.Attention only"):
        TimmEagerAttention.from_module(model.blocks[0].mlp)
    assert not TimmEagerAttention(192, num_heads=3).fused_attn  # built by its constructor too


def test_timm_model_built_with_the_replacement_captures_attentions_without_a_patch() -> None:
    """timm's `attn_layer=` builds every block with the eager attention (no patch to apply)."""
    import timm

    model = timm.create_model(
        "vit_tiny_patch16_224", pretrained=False, depth=2, img_size=32, patch_size=8, attn_layer=TimmEagerAttention
    ).eval()
    with torch.no_grad(), yamltrace.trace(model, "builtin:timm_vit", outputs=["attentions"]) as captures:
        model(*vm.vit_inputs())
    assert [tuple(a.shape) for a in captures["attentions"]] == [(2, 3, 17, 17)] * 2


def test_attention_probabilities_is_an_identity_without_state() -> None:
    module = AttentionProbabilities()
    x = torch.rand(1, 2, 3, 3)
    assert module(x) is x and not list(module.state_dict())
