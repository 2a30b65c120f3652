"""The demo: trace the embedded TinyModel and print what was captured.

Run with `python -m yamltrace.demo` (the README's first command).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from .tiny import TinyConfig, TinyModel
from .tracing import trace

__all__ = ["main", "capture_table"]


def _shape(value: Any) -> str:
    return "x".join(map(str, value.shape)) if isinstance(value, torch.Tensor) else type(value).__name__


def capture_table(captures: Mapping[str, tuple]) -> str:
    """A plain-text table: one row per key with the count and the distinct shapes captured."""
    rows = [("key", "count", "shapes")]
    for key, values in captures.items():
        shapes = sorted({_shape(v) for v in values if v is not None})
        rows.append((key, str(len(values)), ", ".join(shapes) or "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main() -> int:
    torch.manual_seed(0)
    config = TinyConfig()
    model = TinyModel(config).eval()
    input_ids = torch.randint(0, config.vocab_size, (2, 8))
    print(f"TinyModel: {config.num_hidden_layers} layers, hidden {config.hidden_size}, input {tuple(input_ids.shape)}")

    with torch.no_grad(), trace(model) as captures:
        model(input_ids)
    print("\ntrace(model) captured:")
    print(capture_table(captures))

    own = model(input_ids, output_hidden_states=True, output_attentions=True)
    same = all(
        torch.equal(a, b) for key in captures for a, b in zip(captures[key], own[key], strict=True)
    )
    print(f"\nequal to model(..., output_hidden_states=True, output_attentions=True): {same}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
