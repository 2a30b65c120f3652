"""The demo: trace the embedded TinyModel, ship it as a checkpoint with its spec, load it, swap a kernel.

Run with `python -m yamltrace.examples.demo` (the README's first command). Exits 0 when every check holds.
"""

from __future__ import annotations

import tempfile
import textwrap
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ..checkpoint import SPEC_FILE, from_pretrained, save_pretrained
from ..tracing import trace
from .tiny import TinyConfig, TinyModel

__all__ = ["main", "capture_table"]

CHECKPOINT_SPEC = """\
yamltrace: 1
model: TinyModel
imports: [yamltrace.examples.tiny]
outputs:
  hidden_states: TinyDecoderLayer
  attentions: TinyAttention
  mlp_outputs: {target: TinyMLP, index: 0, layers: [0, -1]}   # first and last layer only
"""

# The one line that swaps the attention kernel, given as an override of the shipped spec.
KERNEL_OVERRIDE = """\
yamltrace: 1
patches:
  TinyAttention: yamltrace.kernels:SdpaTinyAttention
"""


def _shape(value: Any) -> str:
    return "x".join(map(str, value.shape)) if isinstance(value, torch.Tensor) else type(value).__name__


def capture_table(captures: Mapping[str, tuple[Any, ...]]) -> str:
    """A plain-text table: one row per key with the count, the entries kept and the shapes captured."""
    rows = [("key", "count", "kept", "shapes")]
    for key, values in captures.items():
        shapes = sorted({_shape(v) for v in values if v is not None})
        kept = sum(v is not None for v in values)
        rows.append((key, str(len(values)), str(kept), ", ".join(shapes) or "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _max_difference(a: tuple[torch.Tensor | None, ...], b: tuple[torch.Tensor | None, ...]) -> float:
    """Largest absolute difference between two capture tuples; both must keep the same positions."""
    if [x is None for x in a] != [y is None for y in b]:
        return float("inf")
    return max(float((x - y).abs().max().item()) for x, y in zip(a, b) if x is not None and y is not None)


def main() -> int:
    torch.manual_seed(0)
    config = TinyConfig()
    model = TinyModel(config).eval()
    input_ids = torch.randint(0, config.vocab_size, (2, 8))
    print(f"TinyModel: {config.num_hidden_layers} layers, hidden {config.hidden_size}, input {tuple(input_ids.shape)}")

    with torch.no_grad(), trace(model) as captures:
        model(input_ids)
    print("\n1. trace(model) with the model's own capture map:")
    print(capture_table(captures))
    own = model(input_ids, output_hidden_states=True, output_attentions=True)
    same = all(torch.equal(a, b) for key in captures for a, b in zip(captures[key], own[key], strict=True))
    print(f"equal to model(..., output_hidden_states=True, output_attentions=True): {same}")

    with tempfile.TemporaryDirectory() as directory:
        checkpoint = Path(directory) / "tiny"
        save_pretrained(model, checkpoint, spec=CHECKPOINT_SPEC)
        print(f"\n2. checkpoint written: {', '.join(sorted(p.name for p in checkpoint.iterdir()))}")
        print(f"   its {SPEC_FILE}:\n" + "\n".join("     " + line for line in CHECKPOINT_SPEC.splitlines()))

        loaded = from_pretrained(TinyModel, checkpoint).eval()
        with torch.no_grad(), trace(loaded) as shipped:
            loaded(input_ids)
        print("\n   from_pretrained(TinyModel, checkpoint), then trace(model) captures what the spec declares:")
        print(capture_table(shipped))

        swapped = from_pretrained(TinyModel, checkpoint, overrides=KERNEL_OVERRIDE).eval()
        with warnings.catch_warnings(record=True) as warned:  # shown in its place below, not amid the output
            warnings.simplefilter("always")
            with torch.no_grad(), trace(swapped) as fused:
                swapped(input_ids)
        print("\n3. the same checkpoint with one line of YAML as an override:")
        print("     " + KERNEL_OVERRIDE.splitlines()[-1].strip())
        print(f"   attention class: {type(swapped.layers[0].self_attn).__name__}")
        print(capture_table(fused))
        print("   (scaled_dot_product_attention returns no weights, so attentions is empty; trace says so:)")
        for warning in warned:
            print(
                textwrap.fill(
                    f"{warning.category.__name__}: {warning.message}", width=100, initial_indent="   ", subsequent_indent="     "
                )
            )

    difference = max(_max_difference(shipped[key], fused[key]) for key in ("hidden_states", "mlp_outputs"))
    agree = difference <= 1e-5
    print(f"\n   swapped vs shipped kernel, hidden states and MLP outputs: max |difference| = {difference:.2e}")
    print(f"   outputs agree within 1e-5: {agree}")
    return 0 if same and agree else 1


if __name__ == "__main__":
    raise SystemExit(main())
