"""Patching against the installed transformers: its lookup and error rules, its MoE router scenario, its leak, Llama."""

from __future__ import annotations

import sys
import types

import pytest
from helpers import selected
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from helpers_transformers import tiny_llama_config
from transformers import LlamaModel, Qwen2MoeConfig, Qwen2MoeModel
from transformers import monkey_patching as hf
from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeTopKRouter

from yamltrace import patch as ours
from yamltrace.kernels import SdpaLlamaAttention
from yamltrace.patch import apply_patches, patch_model, patch_output_recorders
from yamltrace.spec import load_spec
from yamltrace.tracing import trace

pytestmark = pytest.mark.oracle

KEYS = [
    "LlamaAttention",
    ".*Attention",
    "^Llama\\d+Attention$",
    "Attention",
    "Foo(",
    "[",
    "MLP$",
    "Llama",
    "^Qwen",
    "Experts",
    "",
]
NAMES = [
    "LlamaAttention",
    "Llama3Attention",
    "Llama3AttentionX",
    "QwenMLP",
    "Qwen2MoeExperts",
    "Foo(",
    "MistralAttention",
    "Conv",
]
REPLACEMENTS = [type(f"R{i}", (nn.Module,), {}) for i in range(len(KEYS))]


@pytest.fixture(autouse=True)
def empty_transformers_registry():
    assert hf.get_patch_mapping() == {}, "a previous test leaked transformers patch mappings"
    yield
    hf.clear_patch_mapping()


@settings(max_examples=200, deadline=None)
@given(keys=st.lists(st.sampled_from(KEYS), unique=True), name=st.sampled_from(NAMES))
def test_lookup_equals_transformers(keys, name):
    mapping = {key: REPLACEMENTS[KEYS.index(key)] for key in keys}
    assert selected(mapping, name) is hf._find_replacement_class(name, mapping)


def outcome(call) -> type | None:
    try:
        call()
    except Exception as error:  # the exception type is what is compared
        return type(error)
    return None


@pytest.mark.parametrize(
    "operations",
    [
        [("register", {"X": REPLACEMENTS[0]}), ("register", {"X": REPLACEMENTS[1]})],
        [("register", {"X": REPLACEMENTS[0]}), ("overwrite", {"X": REPLACEMENTS[1]})],
        [("register", {"X": REPLACEMENTS[0]()})],
        [("register", {"X": int})],
        [("register", {"X": REPLACEMENTS[0]}), ("unregister", ["Y"])],
        [("register", {"X": REPLACEMENTS[0], ".*": REPLACEMENTS[1]}), ("unregister", ["X"]), ("clear", None)],
    ],
)
def test_registry_outcomes_equal_transformers(operations):
    for kind, argument in operations:
        results = []
        for module in (ours, hf):
            call = {
                "register": lambda: module.register_patch_mapping(argument),
                "overwrite": lambda: module.register_patch_mapping(argument, overwrite=True),
                "unregister": lambda: module.unregister_patch_mapping(argument),
                "clear": module.clear_patch_mapping,
            }[kind]
            results.append(outcome(call))
        assert results[0] is results[1]
        assert ours.get_patch_mapping() == hf.get_patch_mapping()


# ------------------------------------------------------------------------------------------ MoE router


def moe_config() -> Qwen2MoeConfig:
    config = Qwen2MoeConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        moe_intermediate_size=32,
        shared_expert_intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_experts=4,
        num_experts_per_tok=2,
        max_position_embeddings=64,
    )
    config._attn_implementation = "eager"
    return config


class PlainRouter(nn.Module):
    """Qwen2MoeTopKRouter's computation in a class that is not a subclass of it."""

    def __init__(self, config: Qwen2MoeConfig) -> None:
        super().__init__()
        self.top_k = config.num_experts_per_tok
        self.num_experts = config.num_experts
        self.norm_topk_prob = config.norm_topk_prob
        self.hidden_dim = config.hidden_size
        self.weight = nn.Parameter(torch.zeros(self.num_experts, self.hidden_dim))

    forward = Qwen2MoeTopKRouter.forward


class SubclassRouter(Qwen2MoeTopKRouter):
    pass


ROUTER = {"Qwen2MoeTopKRouter": PlainRouter}


@pytest.fixture(scope="module")
def moe_reference():
    torch.manual_seed(0)
    model = Qwen2MoeModel(moe_config()).eval()
    inputs = torch.randint(0, 128, (2, 7), generator=torch.Generator().manual_seed(1))
    logits = model(inputs, output_router_logits=True).router_logits
    assert len(logits) == 2 and all(t.abs().sum() > 0 for t in logits)
    return model, inputs, logits


def build_moe(mapping) -> Qwen2MoeModel:
    with apply_patches(mapping, modules=[Qwen2MoeModel]):
        return Qwen2MoeModel(moe_config()).eval()


def test_moe_router_swap_is_recorded_only_after_patch_output_recorders(moe_reference):
    reference, inputs, expected = moe_reference
    model = build_moe(ROUTER)
    model.load_state_dict(reference.state_dict())
    assert type(model.layers[0].mlp.gate) is PlainRouter

    with trace(model, outputs="router_logits") as before:
        model(inputs)
    assert before["router_logits"] == ()

    with patch_output_recorders(model, ROUTER):
        with trace(model, outputs="router_logits") as captured:
            model(inputs)
    assert len(captured["router_logits"]) == 2
    assert all(torch.equal(a, b) for a, b in zip(captured["router_logits"], expected))


def test_a_true_subclass_of_the_router_is_recorded_without_retargeting(moe_reference):
    reference, inputs, expected = moe_reference
    model = build_moe({"Qwen2MoeTopKRouter": SubclassRouter})
    model.load_state_dict(reference.state_dict())
    with trace(model, outputs="router_logits") as captured:
        model(inputs)
    assert all(torch.equal(a, b) for a, b in zip(captured["router_logits"], expected))


def test_no_leak_after_clear_patch_mapping(moe_reference):
    reference, inputs, _ = moe_reference
    class_map = Qwen2MoeModel._can_record_outputs
    recorder = class_map["router_logits"]
    ours.register_patch_mapping(ROUTER)
    patched = build_moe(None)
    patch_output_recorders(patched)
    ours.clear_patch_mapping()

    torch.manual_seed(0)
    fresh = Qwen2MoeModel(moe_config()).eval()
    assert type(fresh.layers[0].mlp.gate) is Qwen2MoeTopKRouter
    with trace(fresh, outputs="router_logits") as captured:
        fresh(inputs)
    assert len(captured["router_logits"]) == 2
    assert len(fresh(inputs, output_router_logits=True).router_logits) == 2
    assert Qwen2MoeModel._can_record_outputs is class_map
    assert class_map["router_logits"] is recorder and recorder.target_class is Qwen2MoeTopKRouter


def test_transformers_own_patch_output_recorders_leaks(moe_reference):
    """The contrast: transformers retargets the class attribute, so a later model records nothing."""
    _, inputs, _ = moe_reference
    class_map = Qwen2MoeModel._can_record_outputs
    saved = dict(class_map)
    saved_target = saved["router_logits"].target_class
    try:
        hf.register_patch_mapping(ROUTER)
        with hf.apply_patches():
            patched = Qwen2MoeModel(moe_config())
        hf.patch_output_recorders(patched)
        hf.clear_patch_mapping()
        fresh = Qwen2MoeModel(moe_config()).eval()
        assert type(fresh.layers[0].mlp.gate) is Qwen2MoeTopKRouter
        assert fresh(inputs, output_router_logits=True).router_logits == ()
    finally:
        hf.clear_patch_mapping()
        saved["router_logits"].target_class = saved_target
        class_map.clear()
        class_map.update(saved)


# --------------------------------------------------------------------------------------------- Llama


def test_patch_model_on_a_built_llama():
    config = tiny_llama_config(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=3)
    torch.manual_seed(0)
    model = LlamaModel(config).eval()
    inputs = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(1))
    expected = model(inputs, output_hidden_states=True)
    originals = [layer.self_attn for layer in model.layers]
    pointers = [p.data_ptr() for p in model.parameters()]

    handle = patch_model(model, {"LlamaAttention": SdpaLlamaAttention})
    assert [r.path for r in handle.replaced] == [f"layers.{i}.self_attn" for i in range(3)]
    assert all(type(layer.self_attn) is SdpaLlamaAttention for layer in model.layers)
    assert [p.data_ptr() for p in model.parameters()] == pointers
    assert model.layers[1].self_attn.o_proj.weight is originals[1].o_proj.weight
    assert model.layers[2].self_attn.layer_idx == 2

    got = model(inputs).last_hidden_state
    torch.testing.assert_close(got, expected.last_hidden_state, atol=1e-5, rtol=0)
    with pytest.warns(UserWarning, match="'attentions' recorded no tensor.*attn_implementation=\"eager\""):
        with trace(model) as captured:
            model(inputs)
    assert captured["attentions"] == ()
    assert len(captured["hidden_states"]) == 4
    for a, b in zip(captured["hidden_states"], expected.hidden_states):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)

    handle.remove()
    handle.remove()
    assert [layer.self_attn for layer in model.layers] == originals
    assert all(type(layer.self_attn).__name__ == "LlamaAttention" for layer in model.layers)
    assert torch.equal(model(inputs).last_hidden_state, expected.last_hidden_state)


def test_a_broad_pattern_swaps_only_module_classes_of_the_model_modules():
    import transformers.modeling_utils
    import transformers.models.mistral.modeling_mistral as mistral

    interface = transformers.modeling_utils.AttentionInterface
    with apply_patches({".*Attention": SdpaLlamaAttention}, modules=[LlamaModel]) as replaced:
        assert [r.path for r in replaced] == ["transformers.models.llama.modeling_llama.LlamaAttention"]
        assert transformers.modeling_utils.AttentionInterface is interface
        assert mistral.MistralAttention.__name__ == "MistralAttention"
    assert transformers.models.llama.modeling_llama.LlamaAttention.__name__ == "LlamaAttention"


# ------------------------------------------------- apply_patches() without modules: transformers' reach


class _CustomLlamaAttention(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()


def _refusing_module(name: str, refused: str):
    """A module named `transformers...` whose attribute `refused` cannot be set (a swap failing halfway)."""

    class Refusing(types.ModuleType):
        def __setattr__(self, key, value):
            if key == refused and value is not Block:
                raise ImportError(f"{key} cannot be swapped here")
            super().__setattr__(key, value)

    class Block(nn.Module):
        pass

    module = Refusing(name)
    module.FirstBlock = Block
    module.SecondBlock = Block
    return module, Block


def test_apply_patches_without_modules_reaches_every_loaded_transformers_module_and_nothing_else():
    import transformers.models.mistral.modeling_mistral as mistral
    from transformers.models.llama import modeling_llama

    outside = types.ModuleType("not_transformers_probe")
    outside.LlamaAttention = modeling_llama.LlamaAttention
    sys.modules[outside.__name__] = outside
    try:
        with apply_patches({"^(Llama|Mistral)Attention$": _CustomLlamaAttention}) as replaced:
            assert modeling_llama.LlamaAttention is mistral.MistralAttention is _CustomLlamaAttention
            assert outside.LlamaAttention.__name__ == "LlamaAttention"
        assert {r.path for r in replaced} >= {
            "transformers.models.llama.modeling_llama.LlamaAttention",
            "transformers.models.mistral.modeling_mistral.MistralAttention",
        }
    finally:
        del sys.modules[outside.__name__]
    assert modeling_llama.LlamaAttention.__name__ == "LlamaAttention" and mistral.MistralAttention.__name__ == "MistralAttention"


def test_apply_patches_without_modules_restores_everything_when_the_block_raises():
    from transformers.models.llama import modeling_llama

    original = modeling_llama.LlamaAttention
    ours.register_patch_mapping({"LlamaAttention": _CustomLlamaAttention})
    with pytest.raises(RuntimeError, match="inside the block"):
        with apply_patches():
            assert modeling_llama.LlamaAttention is _CustomLlamaAttention
            raise RuntimeError("inside the block")
    assert modeling_llama.LlamaAttention is original  # transformers' own apply_patches leaves the replacement


def test_apply_patches_without_modules_restores_everything_when_a_swap_fails_halfway():
    from transformers.models.llama import modeling_llama

    original = modeling_llama.LlamaAttention
    module, block = _refusing_module("transformers_yamltrace_probe", "SecondBlock")
    sys.modules[module.__name__] = module  # loaded last: the swaps in transformers' modules come first
    try:
        with pytest.raises(ImportError, match="SecondBlock cannot be swapped"):
            with apply_patches({"LlamaAttention": _CustomLlamaAttention, "Block$": _CustomLlamaAttention}):
                pass  # never reached
        assert modeling_llama.LlamaAttention is original
        assert module.FirstBlock is block and module.SecondBlock is block
    finally:
        del sys.modules[module.__name__]


# ------------------------------------------------------- any spec follows the model's own swaps


def _tiny_mixtral():
    from transformers import MixtralConfig, MixtralForCausalLM

    config = MixtralConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=40,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=4,
        num_experts_per_tok=2,
    )
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    return MixtralForCausalLM(config).eval()


SWAP_NORMS = {"yamltrace": 1, "patches": {"MixtralRMSNorm": "yamltrace.kernels:RMSNorm"}}


def _norm_captures(model):
    inputs = torch.randint(0, 64, (1, 6), generator=torch.Generator().manual_seed(1))
    with torch.no_grad(), trace(model, "builtin:mixtral") as captured:
        model(inputs)
    return captured["resid_mid"], captured["final_norm"]


def test_a_spec_traced_on_a_loaded_model_follows_the_swaps_it_was_built_with(tmp_path):
    from transformers import MixtralForCausalLM

    from yamltrace import from_pretrained
    from yamltrace.kernels import RMSNorm

    original = _tiny_mixtral()
    original.save_pretrained(tmp_path)
    expected = _norm_captures(original)
    model = from_pretrained(MixtralForCausalLM, tmp_path, spec=SWAP_NORMS, attn_implementation="eager").eval()
    assert isinstance(model.model.norm, RMSNorm)
    resid_mid, final_norm = _norm_captures(model)  # builtin:mixtral names MixtralRMSNorm, not RMSNorm
    assert len(resid_mid) == 2 and len(final_norm) == 1
    for got, want in zip([*resid_mid, *final_norm], [*expected[0], *expected[1]], strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def test_a_spec_traced_after_patch_model_follows_its_swaps_until_they_are_undone():
    from yamltrace.kernels import RMSNorm

    model = _tiny_mixtral()
    expected = _norm_captures(model)
    with patch_model(model, load_spec(SWAP_NORMS)) as handle:
        assert any(r.replacement is RMSNorm for r in handle.replaced)
        resid_mid, final_norm = _norm_captures(model)
        assert len(resid_mid) == 2 and len(final_norm) == 1
        torch.testing.assert_close(final_norm[0], expected[1][0], atol=1e-5, rtol=0)
    assert [len(c) for c in _norm_captures(model)] == [2, 1]  # the originals again, hooked as before
