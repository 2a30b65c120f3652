"""Each shipped kernel against the module it replaces, on CPU with one thread: forward time, medians and ratios.

Same weights (the replacement shares the original's tensors), same inputs (the arguments the
original got in a real forward of a small model: masks, rotary tables), same process, variants
interleaved round by round (harness.compare, CPU time of the thread). Rows: each replacement per
family where the block differs (Llama RMSNorm / Gemma's `1 + weight`, SwiGLU / GeGLU / Phi3's fused
gate-up, attention with GQA / q-k bias and a window / q-k norms / fused qkv), the rotary kernel, and
whole models (every replacement at once) forward and forward+backward. A ratio above 1 means the
replacement is slower, and the table says so. Run with
`.venv/bin/python -m pytest tests/benchmarks/bench_kernels.py -s` or as a script.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[2]))  # this checkout's yamltrace, also when run as a script
sys.path.insert(0, str(Path(__file__).parents[1] / "oracle"))

import harness  # noqa: E402
import kernel_families  # noqa: E402

from yamltrace.examples.tiny import TinyConfig, TinyModel  # noqa: E402
from yamltrace.kernels import SdpaLlamaAttention, SdpaTinyAttention, apply_rotary  # noqa: E402
from yamltrace.patch import patch_model  # noqa: E402

SEQ = 256
# A small but not toy decoder: hidden 512, 8 query heads of 64 over 2 key/value heads, window 128.
SIZES = dict(
    hidden_size=512,
    intermediate_size=1408,
    num_attention_heads=8,
    num_key_value_heads=2,
    head_dim=64,
    num_hidden_layers=2,
    max_position_embeddings=1024,
    vocab_size=1024,
)
WINDOWED = dict(sliding_window=128, layer_types=["sliding_attention", "full_attention"])
# (row name, family, the class-name suffix of the module, config overrides)
MODULE_ROWS = [
    ("RMSNorm (llama)", "llama", "RMSNorm", {}),
    ("GemmaRMSNorm (gemma)", "gemma", "RMSNorm", {}),
    ("GatedMLP SwiGLU (llama)", "llama", "MLP", {}),
    ("GatedMLP GeGLU (gemma)", "gemma", "MLP", {}),
    ("GatedMLP fused gate_up (phi3)", "phi3", "MLP", {}),
    ("SdpaAttention GQA (llama)", "llama", "Attention", {}),
    ("SdpaAttention bias+window (qwen2)", "qwen2", "Attention", dict(use_sliding_window=True, **WINDOWED)),
    ("SdpaAttention q/k norm (qwen3)", "qwen3", "Attention", {}),
    ("SdpaAttention fused qkv (phi3)", "phi3", "Attention", dict(sliding_window=None)),
]
ROWS: list[tuple[str, float, float]] = []


def _ids(seq: int = SEQ) -> torch.Tensor:
    return torch.randint(1, SIZES["vocab_size"], (1, seq), generator=torch.Generator().manual_seed(1))


def _time(row: str, original: Callable[[], object], replacement: Callable[[], object], calls: int) -> float:
    """Time both, record the row, return the replacement/original ratio of medians."""
    timing = harness.compare({"original": original, "replacement": replacement}, calls=calls)
    print(timing.table(row))
    ratio = timing.ratio("replacement", "original")
    ROWS.append((row, timing.median("original"), timing.median("replacement")))
    verdict = "faster" if ratio < 0.97 else "slower" if ratio > 1.03 else "same"
    harness.record(row, "replacement / original (median ratio)", f"{ratio:.3f} ({verdict})")
    return ratio


def _first(output: object) -> torch.Tensor:
    return output[0] if isinstance(output, tuple) else output  # type: ignore[return-value]


def test_each_replacement_against_its_module():
    for row, family, suffix, overrides in MODULE_ROWS:
        model = kernel_families.build(family, **{**SIZES, **overrides})
        calls = kernel_families.recorded_calls(model, lambda m, s=suffix: type(m).__name__.endswith(s), _ids())
        path, original, args, kwargs = next(c for c in calls if c[0].endswith(("self_attn", "mlp", "input_layernorm")))
        replacement = kernel_families.replacements(family)[f"{suffix}$"].from_module(original)
        with torch.inference_mode():
            torch.testing.assert_close(
                _first(replacement(*args, **kwargs)), _first(original(*args, **kwargs)), atol=1e-4, rtol=1e-4
            )
            _time(f"{row} {path}", lambda: original(*args, **kwargs), lambda: replacement(*args, **kwargs), calls=20)


def test_rotary_against_transformers_apply_rotary_pos_emb():
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    generator = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 8, SEQ, 64, generator=generator), torch.randn(1, 2, SEQ, 64, generator=generator)
    cos, sin = torch.randn(1, SEQ, 64, generator=generator), torch.randn(1, SEQ, 64, generator=generator)
    with torch.inference_mode():
        _time(
            "apply_rotary (8+2 heads)",
            lambda: apply_rotary_pos_emb(q, k, cos, sin),
            lambda: apply_rotary(q, k, cos, sin),
            calls=50,
        )


def _whole_model(family: str, backward: bool) -> None:
    reference = kernel_families.build(family, **SIZES)
    patched = kernel_families.build(family, **SIZES)
    patch_model(patched, kernel_families.replacements(family))
    inputs = _ids()

    def run(model: nn.Module) -> Callable[[], object]:
        if not backward:
            return lambda: model(inputs, use_cache=False)

        def step() -> None:
            model.zero_grad(set_to_none=True)
            model(inputs, use_cache=False).logits.float().square().mean().backward()

        return step

    with torch.no_grad():
        torch.testing.assert_close(patched(inputs).logits, reference(inputs).logits, atol=1e-4, rtol=1e-4)
    label = f"whole {family} model (2 layers) {'forward+backward' if backward else 'forward'}"
    if backward:
        _time(label, run(reference), run(patched), calls=3)
    else:
        with torch.inference_mode():
            _time(label, run(reference), run(patched), calls=5)


def test_whole_models_forward_and_backward():
    for family in ("llama", "qwen3", "gemma3"):
        _whole_model(family, backward=False)
        _whole_model(family, backward=True)


# ----------------------------------------------------------------------- the SDPA attentions, as before


def _llama8_pair() -> tuple[nn.Module, nn.Module]:
    """transformers' 8-layer tiny LlamaModel (eager attention), and a copy patched with SdpaLlamaAttention."""
    from transformers import LlamaModel

    config = harness.llama_config(8)
    config.max_position_embeddings = 256
    torch.manual_seed(0)
    eager = LlamaModel(config).eval()
    sdpa = LlamaModel(config).eval()
    sdpa.load_state_dict(eager.state_dict())
    patch_model(sdpa, {"LlamaAttention": SdpaLlamaAttention})
    return eager, sdpa


def _tiny_pair() -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    eager = TinyModel(TinyConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=8)).eval()
    sdpa = TinyModel(eager.config).eval()
    sdpa.load_state_dict(eager.state_dict())
    patch_model(sdpa, {"TinyAttention": SdpaTinyAttention})
    return eager, sdpa


def test_sdpa_attentions_in_the_tiny_models():
    for name, (eager, sdpa) in (("llama8", _llama8_pair()), ("tiny8", _tiny_pair())):
        for seq in (128, 256):
            inputs = torch.randint(0, 128, (1, seq), generator=torch.Generator().manual_seed(1))
            with torch.inference_mode():
                torch.testing.assert_close(sdpa(inputs).last_hidden_state, eager(inputs).last_hidden_state, atol=1e-5, rtol=0)
                _time(f"{name} sdpa seq={seq}", lambda: eager(inputs), lambda: sdpa(inputs), calls=5)


def markdown_table() -> str:
    lines = ["| replacement (module) | original median | replacement median | replacement / original |", "|---|---|---|---|"]
    for row, original, replacement in ROWS:
        ratio = replacement / original
        note = " (slower)" if ratio > 1.03 else ""
        lines.append(f"| {row} | {original * 1e6:.1f} µs | {replacement * 1e6:.1f} µs | {ratio:.3f}{note} |")
    return "\n".join(lines)


def test_print_the_markdown_table():
    print("\n" + markdown_table())


if __name__ == "__main__":
    test_each_replacement_against_its_module()
    test_rotary_against_transformers_apply_rotary_pos_emb()
    test_whole_models_forward_and_backward()
    test_sdpa_attentions_in_the_tiny_models()
    test_print_the_markdown_table()
