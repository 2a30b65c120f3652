"""Instructions of one `intervene(model, "spec.yaml")` block per forward: what the load cache saves.

`python tests/benchmarks/icount_spec_file_blocks.py [--layers 8] [--n 3]` re-runs itself under
callgrind with the counting helpers of `icount.py` (same method). On the tiny `LlamaModel` with no
decorator (`raw`), a spec file with two interventions (`add` of a vector read from a safetensors
file beside it, on one decoder layer; `scale` of another):

- the forward alone;
- `with intervene(model, path): model(ids)` with the load cache as it is (the spec read once, then
  checked against its files each block);
- the same block with the load cache emptied before it (`spec_loads.clear()`): every block reads
  the YAML, checks the schema, resolves the classes and reads the tensor file again, as a spec with
  interventions always was before the cache kept it.

Interleaved rounds, each variant's median of its same-round differences with the raw forward. Not
collected by pytest; asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import icount  # noqa: E402  (the counting helpers and the driver)

ROUNDS = 3
_SPEC_FILE = """yamltrace: 1
imports: [transformers.models.llama.modeling_llama]
interventions:
  steer: {target: LlamaDecoderLayer, layers: [1], add: {tensor: "steer.safetensors:v"}}
  damp: {target: LlamaDecoderLayer, layers: [2], scale: 0.5}
"""


def variants(model, ids, spec_path: str) -> dict[str, Callable[[], object]]:
    """Every variant of the section, by name (the raw forward first)."""
    import yamltrace
    from yamltrace.spec._load_cache import spec_loads

    def block() -> object:
        with yamltrace.intervene(model, spec_path):
            return model(input_ids=ids)

    def uncached() -> object:
        spec_loads.clear()
        return block()

    return {
        "raw forward": lambda: model(input_ids=ids),
        "one intervene(model, spec file) block per forward, the spec kept": block,
        "the same, the load cache emptied before each block (every block loads the file)": uncached,
    }


def measure(counter: icount.Counter, layers: int) -> dict[str, float]:
    """Instructions per call: the raw forward's median, the others' added medians."""
    import torch
    from safetensors.torch import save_file

    torch.set_num_threads(1)
    model = icount._models(layers)["raw"]
    ids = icount.harness_ids()
    with tempfile.TemporaryDirectory() as folder:
        spec_path = os.path.join(folder, "spec.yaml")
        Path(spec_path).write_text(_SPEC_FILE, encoding="utf-8")
        save_file({"v": torch.full((model.config.hidden_size,), 0.1)}, os.path.join(folder, "steer.safetensors"))
        calls = variants(model, ids, spec_path)
        rounds: dict[str, list[float]] = {name: [] for name in calls}
        with torch.inference_mode():
            for _ in range(ROUNDS):
                for name, call in calls.items():
                    rounds[name].append(counter.per_call(call))
    raw = rounds.pop("raw forward")
    figures = {"raw forward": statistics.median(raw)}
    figures.update((name, statistics.median(v - r for v, r in zip(values, raw))) for name, values in rounds.items())
    return figures


def report(layers: int, figures: dict[str, float], counter: icount.Counter) -> str:
    raw = figures["raw forward"]
    lines = [
        f"\n## One intervene(model, spec file) block per forward, LlamaModel, {layers} layers "
        f"(instructions; N={counter.n}, k={counter.k}, {ROUNDS} rounds)\n",
        "| variant | added per forward | ÷ raw forward |",
        "|---|---|---|",
        f"| raw forward | {raw:,.0f} (the forward) | |",
    ]
    lines += [f"| {name} | {value:+,.0f} | {value / raw:.4f} |" for name, value in figures.items() if name != "raw forward"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[8])
    parser.add_argument("--n", type=int, default=3)
    parser.add_argument("--k", type=int, default=1)
    args = parser.parse_args(argv)
    counter = icount.worker_counter(args.n, args.k)
    if counter is not None:
        (layers,) = args.layers
        print(report(layers, measure(counter, layers), counter), flush=True)
        return 0
    return icount.run_workers(__file__, args.layers, args.n, args.k)


if __name__ == "__main__":
    sys.exit(main())
