"""What one forward captures under the worst accepted spec: retained tensor bytes, not wall time.

Run: `python tests/benchmarks/spec_capture_memory.py` (figures in docs/security.md, "Capture"). Each
spec is loaded with `load_spec` (a spec load refuses, the figure says so) and traced on TinyModel's
default config with input ids of shape [8, 512]; the bytes are those of the distinct storages the
captures hold.
"""

from __future__ import annotations

import sys

import torch

from yamltrace import SpecError, load_spec, trace
from yamltrace.examples.tiny import TinyConfig, TinyModel

LAYER = "yamltrace.examples.tiny:TinyDecoderLayer"


def _captured_bytes(spec: dict) -> str:
    try:
        loaded = load_spec(spec)
    except SpecError as e:
        return f"refused: {e.issues[0].json_path}: {e.issues[0].message[:70]}"
    torch.manual_seed(0)
    model = TinyModel(TinyConfig()).eval()
    ids = torch.randint(0, model.config.vocab_size, (8, 512))
    with torch.no_grad(), trace(model, loaded) as captured:
        model(ids)
    storages = {
        t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
        for values in captured.values() for t in values if isinstance(t, torch.Tensor)
    }  # fmt: skip
    return f"{sum(storages.values()) / 1e6:,.1f} MB in {sum(len(v) for v in captured.values())} captures"


def main() -> None:
    copies = {"target": LAYER, "dtype": "float64"}
    # Distinct recorders that all hook every layer (layer_name variants) in float64, as many as accepted.
    variants = [{"target": LAYER, "dtype": "float64", "layer_name": "." * i + "layers"} for i in range(16)]
    cases = {
        "one recorder, hidden_states: TinyDecoderLayer": {"outputs": {"hidden_states": LAYER}},
        "1,000 copies of one float64 recorder": {"outputs": {"hidden_states": [copies] * 1000}},
        "64 distinct float64 recorders (16 keys x 4, the caps)": {"outputs": {f"k{k}": variants for k in range(4)}},
        "65 distinct recorders": {"outputs": {**{f"k{k}": variants for k in range(4)}, "k4": LAYER}},
    }
    for name, body in cases.items():
        print(f"{name}: {_captured_bytes({'yamltrace': 1, **body})}", file=sys.stdout)


if __name__ == "__main__":
    main()
