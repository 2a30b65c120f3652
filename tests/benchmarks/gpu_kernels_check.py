"""The kernel checks on a GPU: allclose per family and replacement, then timings and peak memory. A script, not a test.

Run `python tests/benchmarks/gpu_kernels_check.py` on a machine with CUDA (it uses the CPU when there
is none, so it can be tried anywhere; the table says which device ran). For each family of
tests/oracle/kernel_families.py, in float32 and bfloat16: each replacement made by `from_module`
against the module it replaces, on the arguments it got in a real forward (float32 1e-5 — on a GPU
with TF32 off; bfloat16 rtol=atol=1.6e-2), and the whole patched model's logits. Then the same
timing rows as bench_kernels.py on the device (CUDA events, median of 21 rounds after 3 warm-ups)
with the peak memory of a whole-model forward. Exit status 1 when a check fails.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parents[2]))  # this checkout's yamltrace, also when run as a script
sys.path.insert(0, str(Path(__file__).parents[1] / "oracle"))

import kernel_families  # noqa: E402

from yamltrace.patch import patch_model  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TOLERANCE = {torch.float32: dict(atol=1e-5, rtol=0), torch.bfloat16: dict(atol=1.6e-2, rtol=1.6e-2)}
KINDS = {"attention": "Attention", "norm": "RMSNorm", "mlp": "MLP"}
SIZES = dict(
    hidden_size=512,
    intermediate_size=1408,
    num_attention_heads=8,
    num_key_value_heads=2,
    head_dim=64,
    max_position_embeddings=2048,
    vocab_size=1024,
)


def _first(output):
    return output[0] if isinstance(output, tuple) else output


def _sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def _median_ms(fn: Callable[[], object], rounds: int = 21, warmup: int = 3, calls: int = 10) -> float:
    samples = []
    for index in range(warmup + rounds):
        _sync()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        _sync()
        if index >= warmup:
            samples.append((time.perf_counter() - start) / calls * 1e3)
    return statistics.median(samples)


def check_allclose() -> list[str]:
    """One line per (family, dtype, kind) check; failures start with FAIL."""
    lines = []
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    for family in kernel_families.FAMILIES:
        for dtype in (torch.float32, torch.bfloat16):
            model = kernel_families.build(family).to(DEVICE, dtype)
            mapping = kernel_families.replacements(family)
            inputs = kernel_families.ids().to(DEVICE)
            for kind, suffix in KINDS.items():
                key = f"{suffix}$"
                if key not in mapping:
                    continue
                calls = kernel_families.recorded_calls(model, lambda m, s=suffix: type(m).__name__.endswith(s), inputs)
                worst, ok = 0.0, True
                for _, original, args, kwargs in calls:
                    replacement = mapping[key].from_module(original)
                    with torch.no_grad():
                        expected, got = _first(original(*args, **kwargs)), _first(replacement(*args, **kwargs))
                    worst = max(worst, (got.float() - expected.float()).abs().max().item())
                    ok &= torch.allclose(got.float(), expected.float(), **TOLERANCE[dtype])
                lines.append(f"{'ok  ' if ok else 'FAIL'} {family:<10} {str(dtype)[6:]:<9} {kind:<10} max |diff| {worst:.2e}")
            with torch.no_grad():
                expected = model(inputs, use_cache=False).logits
                with patch_model(model, mapping):
                    got = model(inputs, use_cache=False).logits
            ok = torch.allclose(
                got.float(),
                expected.float(),
                **(TOLERANCE[torch.float32] if dtype == torch.float32 else dict(atol=6e-2, rtol=2e-2)),
            )
            lines.append(
                f"{'ok  ' if ok else 'FAIL'} {family:<10} {str(dtype)[6:]:<9} {'model':<10} max |diff| {(got.float() - expected.float()).abs().max().item():.2e}"
            )
    return lines


def timings(seq: int = 1024) -> list[str]:
    """Whole-model forward time and peak memory, original vs every replacement, per family, bfloat16."""
    lines = [
        "| family | original ms | replacement ms | ratio | original peak MiB | replacement peak MiB |",
        "|---|---|---|---|---|---|",
    ]
    inputs = torch.randint(1, SIZES["vocab_size"], (1, seq), device=DEVICE)
    for family in ("llama", "qwen2", "qwen3", "gemma3", "phi3"):
        figures = []
        for patched in (False, True):
            model = kernel_families.build(family, **SIZES).to(DEVICE, torch.bfloat16)
            if patched:
                patch_model(model, kernel_families.replacements(family))
            with torch.inference_mode():
                median = _median_ms(lambda m=model: m(inputs, use_cache=False))
                peak = float("nan")
                if DEVICE == "cuda":
                    torch.cuda.reset_peak_memory_stats()
                    model(inputs, use_cache=False)
                    peak = torch.cuda.max_memory_allocated() / 2**20
            figures.append((median, peak))
            del model
        (a, pa), (b, pb) = figures
        lines.append(f"| {family} | {a:.2f} | {b:.2f} | {b / a:.3f}{' (slower)' if b > 1.03 * a else ''} | {pa:.0f} | {pb:.0f} |")
    return lines


def main() -> int:
    name = torch.cuda.get_device_name() if DEVICE == "cuda" else "CPU (no CUDA device)"
    print(f"device: {name}, torch {torch.__version__}")
    checks = check_allclose()
    print("\n".join(checks))
    print("\n".join(timings(1024 if DEVICE == "cuda" else 128)))
    failed = [line for line in checks if line.startswith("FAIL")]
    print(f"{len(checks) - len(failed)} checks passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
