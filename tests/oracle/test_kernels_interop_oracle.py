"""Kernels through specs: from_pretrained with a shipped kernel, clear refusals, device-conditioned entries (CPU).

The Liger-Kernel classes are stand-ins with Liger's constructors whose forward raises (Liger's
Triton kernels need a GPU): installed in `sys.modules` as `liger_kernel.transformers`, so the
example `docs/specs/llama-liger.yaml` resolves, and the tests show which entries apply on which device.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import torch
from helpers import ROOT
from kernel_families import build, config, ids, model_class
from torch import nn

from yamltrace.checkpoint import from_pretrained
from yamltrace.errors import PatchError, SpecError
from yamltrace.kernels import (
    GatedMLP,
    RMSNorm,
    SdpaAttention,
    SdpaLlamaAttention,
    UnsupportedModuleError,
)
from yamltrace.patch import RenamedState, apply_patches, patch_model
from yamltrace.spec import load_spec

pytestmark = pytest.mark.oracle

LIGER_SPEC = ROOT / "docs" / "specs" / "llama-liger.yaml"
SOFTCAP = r"it soft-caps the attention logits \(attn_logit_softcapping=50\.0\), which scaled_dot_product_attention cannot do"


def spec_for(pattern: str, replacement: str) -> str:
    return f"yamltrace: 1\noutputs:\n  hidden_states: {pattern.replace('Attention', 'DecoderLayer')}\npatches:\n  {pattern}: {replacement}\n"


@pytest.fixture(scope="module")
def qwen2_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("qwen2")
    build("qwen2").save_pretrained(directory)
    return directory


def test_sdpa_llama_attention_over_qwen2_attention_through_from_pretrained_keeps_the_biases(qwen2_dir, tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(spec_for("Qwen2Attention", "yamltrace.kernels:SdpaLlamaAttention"))
    cls = model_class("qwen2")
    model = from_pretrained(cls, qwen2_dir, spec=spec, attn_implementation="eager").eval()
    attention = model.model.layers[0].self_attn
    assert type(attention) is SdpaLlamaAttention
    assert attention.q_proj.bias is not None and attention.o_proj.bias is None
    reference = cls.from_pretrained(qwen2_dir, attn_implementation="eager").eval()
    with torch.no_grad():
        torch.testing.assert_close(model(ids()).logits, reference(ids()).logits, atol=1e-5, rtol=0)


def test_softcapping_is_refused_through_apply_patches_naming_it():
    cls = model_class("gemma2")
    with pytest.raises(
        UnsupportedModuleError, match=rf"SdpaAttention cannot replace the attention of model_type 'gemma2': {SOFTCAP}"
    ):
        with apply_patches({"Gemma2Attention": SdpaAttention}, modules=[cls]):
            cls(config("gemma2", attn_logit_softcapping=50.0))


def test_softcapping_is_refused_through_patch_model_with_the_module_path():
    model = build("gemma2", attn_logit_softcapping=50.0)
    with pytest.raises(
        PatchError,
        match=rf"model\.layers\.0\.self_attn: SdpaAttention\.from_module failed: SdpaAttention cannot replace .*Gemma2Attention: {SOFTCAP}",
    ):
        patch_model(model, {"Gemma2Attention": SdpaAttention})
    assert all(type(layer.self_attn).__name__ == "Gemma2Attention" for layer in model.model.layers)


def test_a_norm_is_not_adopted_as_attention_through_patch_model():
    model = build("llama")
    with pytest.raises(
        PatchError,
        match=r"model\.layers\.0\.input_layernorm: SdpaAttention\.from_module failed: SdpaAttention cannot replace .*LlamaRMSNorm: it is not shaped like a decoder self-attention \(it has no head_dim, num_key_value_groups, scaling, layer_idx, attention_dropout, q_proj, k_proj, v_proj, o_proj\)",
    ):
        patch_model(model, {"LlamaRMSNorm": SdpaAttention})


# ------------------------------------------------------------------------------ device-conditioned entries


class _TritonOnly(nn.Module):
    def forward(self, *args, **kwargs):
        raise RuntimeError("a Triton kernel: needs a CUDA device")


class LigerRMSNorm(_TritonOnly):
    def __init__(self, hidden_size, eps=1e-6, offset=0.0, casting_mode="llama", init_fn="ones", in_place=True):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps


class LigerSwiGLUMLP(_TritonOnly):
    def __init__(self, config):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)


@pytest.fixture
def liger(monkeypatch):
    package, module = types.ModuleType("liger_kernel"), types.ModuleType("liger_kernel.transformers")
    LigerRMSNorm.__module__ = LigerSwiGLUMLP.__module__ = "liger_kernel.transformers"
    module.LigerRMSNorm, module.LigerSwiGLUMLP, package.transformers = LigerRMSNorm, LigerSwiGLUMLP, module
    monkeypatch.setitem(sys.modules, "liger_kernel", package)
    monkeypatch.setitem(sys.modules, "liger_kernel.transformers", module)
    return module


def test_the_liger_spec_needs_liger_kernel_imported_to_load():
    from transformers import LlamaModel

    assert "liger_kernel" not in sys.modules
    with pytest.raises(SpecError) as caught:
        load_spec(LIGER_SPEC, for_model=LlamaModel)
    paths = {issue.json_path for issue in caught.value.issues}
    assert paths == {"$.patches.LlamaRMSNorm.replace_with", "$.patches.LlamaMLP.replace_with"}
    assert all("liger_kernel" in issue.message for issue in caught.value.issues)


def assert_swaps_the_three_blocks_and_equals_eager(spec) -> None:
    """patch_model with `spec` on a tiny LlamaModel replaces attention, norms and MLPs by yamltrace's
    kernels (on CPU) and keeps the last hidden state within 1e-5."""
    from transformers import LlamaModel

    torch.manual_seed(0)
    model = LlamaModel(config("llama")).eval()
    expected = model(ids()).last_hidden_state
    with patch_model(model, spec) as handle:
        assert {r.replacement for r in handle.replaced} == {SdpaAttention, RMSNorm, GatedMLP}
        torch.testing.assert_close(model(ids()).last_hidden_state, expected, atol=1e-5, rtol=0)


def test_on_cpu_patch_model_skips_the_cuda_entries_and_equals_eager(liger):
    from transformers import LlamaModel

    assert_swaps_the_three_blocks_and_equals_eager(load_spec(LIGER_SPEC, for_model=LlamaModel))


def test_apply_patches_selects_the_entries_of_the_device(liger):
    from transformers import LlamaModel

    spec = load_spec(LIGER_SPEC, for_model=LlamaModel)
    built = {}
    for device in ("cpu", "cuda"):
        with apply_patches(spec, modules=[LlamaModel], device=device):
            # Liger's SwiGLU MLP has no biases: a Llama with `mlp_bias` would be refused (its state names differ).
            model = LlamaModel(config("llama", mlp_bias=False))
        built[device] = {type(model.layers[0].input_layernorm), type(model.layers[0].mlp), type(model.layers[0].self_attn)}
    assert built["cpu"] == {RMSNorm, GatedMLP, SdpaAttention}
    assert built["cuda"] == {liger.LigerRMSNorm, liger.LigerSwiGLUMLP, SdpaAttention}


def test_patch_model_cannot_adopt_a_liger_class_and_says_how(liger):
    from transformers import LlamaModel

    spec = load_spec(LIGER_SPEC, for_model=LlamaModel)
    model = LlamaModel(config("llama"))
    with pytest.raises(PatchError, match=r"cannot become liger_kernel\.transformers\.LigerRMSNorm: it has no from_module"):
        patch_model(model, spec, device="cuda")


def test_the_llama_kernels_example_swaps_all_three_and_equals_eager():
    from transformers import LlamaModel

    assert_swaps_the_three_blocks_and_equals_eager(
        load_spec(ROOT / "docs" / "specs" / "llama-kernels.yaml", for_model=LlamaModel)
    )


class FusedQwen2MLP(nn.Module):
    """Qwen2MLP with the gate and up projections fused: other parameter names."""

    def __init__(self, config, intermediate_size=None):  # type: ignore[no-untyped-def]
        super().__init__()
        inner = intermediate_size or config.intermediate_size
        self.gate_up_proj = nn.Linear(config.hidden_size, 2 * inner, bias=False)
        self.down_proj = nn.Linear(inner, config.hidden_size, bias=False)

    def forward(self, x):  # type: ignore[no-untyped-def]
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(nn.functional.silu(gate) * up)


def test_a_replacement_named_otherwise_is_refused_before_transformers_loads_weights(qwen2_dir, tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"yamltrace: 1\npatches:\n  Qwen2MLP: {__name__}:FusedQwen2MLP\n")
    with pytest.raises(
        PatchError,
        match=r"modeling_qwen2\.Qwen2MLP: test_kernels_interop_oracle\.FusedQwen2MLP cannot take the state of "
        r"transformers\.models\.qwen2\.modeling_qwen2\.Qwen2MLP by name: .* has gate_proj\.weight, up_proj\.weight, which",
    ):
        from_pretrained(model_class("qwen2"), qwen2_dir, spec=spec, trust_imports=True)


class RenamedQwen2MLP(RenamedState):
    renamed_state = {"gate_proj.weight": "w1.weight", "up_proj.weight": "w3.weight", "down_proj.weight": "w2.weight"}

    def __init__(self, config, intermediate_size=None):  # type: ignore[no-untyped-def]
        super().__init__()
        inner = intermediate_size or config.intermediate_size
        self.w1, self.w3 = nn.Linear(config.hidden_size, inner, bias=False), nn.Linear(config.hidden_size, inner, bias=False)
        self.w2 = nn.Linear(inner, config.hidden_size, bias=False)

    def forward(self, x):  # type: ignore[no-untyped-def]
        return self.w2(nn.functional.silu(self.w1(x)) * self.w3(x))


def test_a_declared_renaming_is_refused_for_transformers_which_loads_by_name(qwen2_dir, tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"yamltrace: 1\npatches:\n  Qwen2MLP: {__name__}:RenamedQwen2MLP\n")
    with pytest.raises(PatchError, match=r"declares `renamed_state`, but transformers' from_pretrained sets weights by name"):
        from_pretrained(model_class("qwen2"), qwen2_dir, spec=spec, trust_imports=True)
