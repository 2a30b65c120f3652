"""Instructions per forward of token-position selection (`positions`), counted by callgrind.

`python tests/benchmarks/icount_positions.py [--layers 8]` re-runs itself under callgrind with the
counting helpers of `icount.py` (same method: client requests, one process per layer count,
`(count over N + k calls - count over k calls) / N`). Variants, all in one process, on the raw tiny
`LlamaModel` (no decorator): the forward alone; `trace` with a spec capturing `hidden_states` and
`resid_mid` (2 x layers + 1 values per forward) without positions; the same spec with `positions: [-1]`,
`"-8:"` and `[0, -1]`; and, to see what the general listener path costs, the spec without positions
with every layer listed in `layers` (all kept, each value through `Collector.record`). The figure the issue sets is

    (added by the capture with positions - added by the capture without) / added by the capture without

(target < 5 %). For scale, the last rows count single torch ops on as many `[1, seq, hidden]`
tensors as the capture records per forward: the floor of any selection that copies at capture time.
Not collected by pytest; asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import icount  # noqa: E402  (the counting helpers and the driver)

POSITIONS: dict[str, object] = {"[-1]": [-1], '"-8:"': "-8:", "[0, -1]": [0, -1]}


def _spec(positions: object, layers: int | None = None) -> dict:
    """hidden_states and resid_mid, with `positions`; with `layers`, every layer listed in `layers:`
    (which keeps all of them but sends each value through `Collector.record`, the general path)."""
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRMSNorm

    from yamltrace import OutputRecorder

    kept = None if layers is None else tuple(range(layers + 1))
    return {
        "hidden_states": OutputRecorder(LlamaDecoderLayer, index=0, positions=positions, layers=kept),
        "resid_mid": OutputRecorder(LlamaRMSNorm, layer_name="post_attention_layernorm", input=0, positions=positions),
    }


def measure(counter: icount.Counter, layers: int) -> tuple[dict[str, float], int]:
    """Instructions per forward of each variant, and the number of values a forward captures."""
    import torch

    import yamltrace

    torch.set_num_threads(1)
    model = icount._models(layers)["raw"]
    ids = icount.harness_ids()
    per: dict[str, float] = {}

    def row(name: str, call: Callable[[], object]) -> None:
        with torch.inference_mode():
            per[name] = counter.per_call(call)

    forward = lambda: model(input_ids=ids)  # noqa: E731
    row("raw forward", forward)
    values = 0
    for name, positions in {"no positions": None, **POSITIONS}.items():
        with yamltrace.trace(model, _spec(positions)) as captures:
            row(f"trace, {name}", forward)
        values = len(captures["hidden_states"]) + len(captures["resid_mid"])
    values //= 2 * counter.k + counter.n + 2  # every call of the two counts and the warm-up
    with yamltrace.trace(model, _spec(None, layers)):
        row("trace, no positions, every value through Collector.record", forward)

    with torch.inference_mode():
        hidden = model(input_ids=ids).last_hidden_state
    tensors = [hidden.clone() for _ in range(values)]
    seq = hidden.shape[1]
    ops: dict[str, Callable[[torch.Tensor], object]] = {
        "narrow (a view)": lambda t: t.narrow(1, seq - 1, 1),
        "narrow + clone": lambda t: t.narrow(1, seq - 1, 1).clone(),
        "narrow_copy": lambda t: t.narrow_copy(1, seq - 1, 1),
        "index_select (cached index)": lambda t, i=torch.tensor([seq - 1]): t.index_select(1, i),  # noqa: B008 (built once, on purpose)
        "python loop, no op": lambda t: t,
    }
    store: list = []  # results stay alive, as captures do (their release is not part of a forward)
    for name, op in ops.items():
        row(f"{values} x {name}", lambda op=op: store.extend([op(t) for t in tensors]))
    return per, values


def report(layers: int, per: dict[str, float], values: int, counter: icount.Counter) -> str:
    raw = per["raw forward"]
    capture = per["trace, no positions"] - raw
    lines = [
        f"\n## Positions, LlamaModel {layers} layers, {values} captured values per forward "
        f"(instructions per forward; N={counter.n}, k={counter.k})\n",
        "| variant | instructions | added over raw | added by positions | per value | ratio to capture's added (target < 0.05) |",
        "|---|---|---|---|---|---|",
        f"| raw forward | {raw:,.0f} | | | | |",
        f"| trace, no positions | {per['trace, no positions']:,.0f} | {capture:+,.0f} | | {capture / values:,.0f} | |",
    ]
    general = per["trace, no positions, every value through Collector.record"]
    lines.append(
        f"| trace, no positions, every value through `Collector.record` | {general:,.0f} | {general - raw:+,.0f} | "
        f"{general - per['trace, no positions']:+,.0f} | | |"
    )
    for name in POSITIONS:
        value = per[f"trace, {name}"]
        extra = value - per["trace, no positions"]
        lines.append(
            f"| trace, positions {name} | {value:,.0f} | {value - raw:+,.0f} | {extra:+,.0f} | "
            f"{extra / values:,.0f} | {extra / capture:.3f} |"
        )
    loop = per[f"{values} x python loop, no op"]
    lines.append("\n| single ops on captured-size tensors | instructions | per value (loop subtracted) |\n|---|---|---|")
    for name, value in per.items():
        if name.startswith(f"{values} x "):
            lines.append(f"| {name} | {value:,.0f} | {(value - loop) / values:,.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[8])
    parser.add_argument("--n", type=int, default=6, help="calls measured (the difference of two counts)")
    parser.add_argument("--k", type=int, default=1, help="calls of the shorter count")
    args = parser.parse_args(argv)
    counter = icount.worker_counter(args.n, args.k)
    if counter is not None:
        (layers,) = args.layers
        per, values = measure(counter, layers)
        print(report(layers, per, values, counter), flush=True)
        return 0
    return icount.run_workers(__file__, args.layers, args.n, args.k)


if __name__ == "__main__":
    sys.exit(main())
