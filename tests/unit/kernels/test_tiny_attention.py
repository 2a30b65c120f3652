"""SdpaTinyAttention equals the demo model's eager attention (float32, 1e-5), shares its weights, adopts nothing else."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from yamltrace.errors import PatchError
from yamltrace.examples.tiny import TinyAttention, TinyConfig, TinyMLP
from yamltrace.kernels import (
    SdpaAttention,
    SdpaLlamaAttention,
    SdpaTinyAttention,
    UnsupportedModuleError,
)
from yamltrace.patch import patch_model

TOLERANCE = dict(atol=1e-5, rtol=0)


def test_importing_the_kernels_does_not_import_transformers():
    code = "import sys, yamltrace.kernels; print('transformers' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


@pytest.mark.parametrize("seq", [1, 7, 130])
def test_sdpa_tiny_attention_equals_the_eager_one(seq):
    torch.manual_seed(0)
    eager = TinyAttention(TinyConfig())
    sdpa = SdpaTinyAttention.from_module(eager)
    hidden = torch.randn(3, seq, 32)
    expected, weights = eager(hidden)
    got, no_weights = sdpa(hidden)
    torch.testing.assert_close(got, expected, **TOLERANCE)
    assert weights.shape == (3, 4, seq, seq) and no_weights is None


def test_sdpa_tiny_attention_from_module_shares_everything():
    eager = TinyAttention(TinyConfig()).train(False)
    sdpa = SdpaTinyAttention.from_module(eager)
    assert dict(sdpa.named_parameters()).keys() == dict(eager.named_parameters()).keys()
    assert all(a is b for a, b in zip(sdpa.parameters(), eager.parameters()))
    assert (sdpa.num_heads, sdpa.head_dim, sdpa.training) == (4, 8, False)
    assert sdpa.q_proj is eager.q_proj


def test_sdpa_tiny_attention_builds_from_the_same_constructor():
    torch.manual_seed(0)
    eager = TinyAttention(TinyConfig())
    torch.manual_seed(0)
    built = SdpaTinyAttention(TinyConfig())
    assert all(torch.equal(a, b) for a, b in zip(built.state_dict().values(), eager.state_dict().values()))


def test_sdpa_tiny_attention_refuses_a_module_that_is_not_tiny_attention():
    with pytest.raises(
        UnsupportedModuleError,
        match=r"SdpaTinyAttention cannot replace yamltrace\.examples\.tiny\.TinyMLP: it replaces yamltrace\.examples\.tiny\.TinyAttention only",
    ):
        SdpaTinyAttention.from_module(TinyMLP(TinyConfig()))


def test_patch_model_names_the_module_a_kernel_cannot_adopt_and_changes_nothing(tiny, input_ids):
    expected = tiny(input_ids).last_hidden_state
    with pytest.raises(
        PatchError, match=r"layers\.0\.mlp: SdpaTinyAttention\.from_module failed: SdpaTinyAttention cannot replace .*TinyMLP"
    ):
        patch_model(tiny, {"TinyMLP": SdpaTinyAttention})
    assert type(tiny.layers[0].mlp) is TinyMLP
    torch.testing.assert_close(tiny(input_ids).last_hidden_state, expected, atol=0, rtol=0)


@pytest.mark.parametrize("kernel", [SdpaAttention, SdpaLlamaAttention])
def test_sdpa_attention_refuses_tiny_attention_naming_what_it_lacks(kernel):
    with pytest.raises(
        UnsupportedModuleError,
        match=rf"{kernel.__name__} cannot replace yamltrace\.examples\.tiny\.TinyAttention: it is not shaped like a decoder "
        r"self-attention \(it has no num_key_value_groups, scaling, layer_idx, attention_dropout\)",
    ):
        kernel.from_module(TinyAttention(TinyConfig()))


def test_sdpa_attention_refuses_an_unknown_config_naming_the_supported_ones():
    config = TinyConfig()
    with pytest.raises(
        UnsupportedModuleError,
        match=r"SdpaAttention cannot replace the attention of model_type 'yamltrace-tiny': supported model types are gemma, gemma2, gemma3_text, llama, mistral, mixtral, phi3, qwen2, qwen2_moe, qwen3\.",
    ):
        SdpaAttention(config, 0)


def test_an_unsupported_module_error_is_a_yamltrace_error_and_a_type_error():
    from yamltrace.errors import YamltraceError

    assert issubclass(UnsupportedModuleError, YamltraceError) and issubclass(UnsupportedModuleError, TypeError)
