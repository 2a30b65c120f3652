"""SDPA attention kernels against the eager attentions they replace, on CPU with one thread.

Same weights, same process, variants interleaved round by round (harness.compare). Run with
`.venv/bin/python -m pytest tests/benchmarks/bench_kernels.py -s` or as a script.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))

import harness  # noqa: E402

from yamltrace.kernels import SdpaLlamaAttention, SdpaTinyAttention  # noqa: E402
from yamltrace.patch import patch_model  # noqa: E402
from yamltrace.examples.tiny import TinyConfig, TinyModel  # noqa: E402

SEQUENCE_LENGTHS = (128, 256)


def _compare(benchmark: str, eager: torch.nn.Module, sdpa: torch.nn.Module, inputs: torch.Tensor, calls: int) -> float:
    """Time both forwards, check they agree, record and return the sdpa/eager ratio of medians."""
    with torch.inference_mode():
        torch.testing.assert_close(sdpa(inputs).last_hidden_state, eager(inputs).last_hidden_state, atol=1e-5, rtol=0)
        timing = harness.compare({"eager": lambda: eager(inputs), "sdpa": lambda: sdpa(inputs)}, calls=calls)
    print(timing.table(benchmark))
    ratio = timing.ratio("sdpa", "eager")
    harness.record(benchmark, "forward time, sdpa / eager (median ratio)", f"{ratio:.3f}", "< 1")
    harness.record(benchmark, "eager / sdpa median per forward", f"{timing.median('eager') * 1e3:.2f} ms / {timing.median('sdpa') * 1e3:.2f} ms")
    return ratio


def _llama_pair() -> tuple[torch.nn.Module, torch.nn.Module]:
    """transformers' 8-layer tiny LlamaModel (eager attention), and a copy patched with SdpaLlamaAttention."""
    from transformers import LlamaModel

    config = harness.llama_config(8)
    config.max_position_embeddings = max(SEQUENCE_LENGTHS)
    torch.manual_seed(0)
    eager = LlamaModel(config).eval()
    sdpa = LlamaModel(config).eval()
    sdpa.load_state_dict(eager.state_dict())
    patch_model(sdpa, {"LlamaAttention": SdpaLlamaAttention})
    return eager, sdpa


def _tiny_pair() -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    eager = TinyModel(TinyConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=8)).eval()
    sdpa = TinyModel(eager.config).eval()
    sdpa.load_state_dict(eager.state_dict())
    patch_model(sdpa, {"TinyAttention": SdpaTinyAttention})
    return eager, sdpa


def test_sdpa_llama_attention_is_faster_on_cpu():
    eager, sdpa = _llama_pair()
    for seq in SEQUENCE_LENGTHS:
        ratio = _compare(f"llama8 sdpa seq={seq}", eager, sdpa, harness.input_ids(seq=seq), calls=5)
        assert ratio < 1.0, f"SdpaLlamaAttention is not faster than eager at seq={seq}: ratio {ratio:.3f}"


def test_sdpa_tiny_attention_is_faster_on_cpu():
    eager, sdpa = _tiny_pair()
    for seq in SEQUENCE_LENGTHS:
        inputs = torch.randint(0, 128, (1, seq), generator=torch.Generator().manual_seed(1))
        ratio = _compare(f"tiny8 sdpa seq={seq}", eager, sdpa, inputs, calls=5)
        assert ratio < 1.0, f"SdpaTinyAttention is not faster than eager at seq={seq}: ratio {ratio:.3f}"


if __name__ == "__main__":
    test_sdpa_llama_attention_is_faster_on_cpu()
    test_sdpa_tiny_attention_is_faster_on_cpu()
