"""Instructions of one `trace` block per forward (`make bench-icount`), the way people use `trace`.

`python tests/benchmarks/icount_blocks.py [--layers 8 32] [--n 4]` re-runs itself under callgrind with
the counting helpers of `icount.py` (same method: client requests, one process per layer count, a
call's cost as the difference of two counts). On the tiny `LlamaModel` with no decorator (`raw`):

- the forward alone;
- forward hooks on the modules the model's own map hooks (its decoder layers and attention modules),
  appending what the recorder keeps (`output[index]`), registered before and removed after each
  forward: the baseline of the budget (one block per forward adds at most 1.2 times what they add);
- `with trace(model, spec): model(ids)` for each way of naming the same recorders: the model's own map
  (`spec=None`), a dict spec, a spec file, and `builtin:llama` with `outputs=` its two keys;
- an empty block (`with trace(model): pass`), whose cost is all set-up and tear-down, beside the
  cost of registering and removing the hooks' forward hooks alone (what any block on torch's hooks
  pays, with nothing of yamltrace's);
- the peer tasks T2 and T3 (`peers.py`), each beside its own hooks: T2, a dict spec recording each
  decoder layer's, attention's and MLP's output, against forward hooks appending those outputs; T3, a
  dict spec recording each decoder layer's last position (literal `positions: [-1]`, which gives the
  root call a padding watch), against forward hooks appending `output[:, -1:]` (a view, the ratio's
  baseline), and beside hooks appending a copy of it (what the recorder keeps, `narrow_copy`, and
  peers.py's hooks keep).

The variants are measured in interleaved rounds, each reported as the median of its same-round
differences with the raw forward. Not collected by pytest; asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import icount  # noqa: E402  (the counting helpers and the driver)

ROUNDS = 3
_SPEC_FILE = """yamltrace: 1
imports: [transformers.models.llama.modeling_llama]
outputs:
  hidden_states: LlamaDecoderLayer
  attentions: LlamaAttention
"""


def _hooks(model, plan, ids) -> Callable[[], object]:
    """A forward with hooks appending what each recorder keeps, registered and removed around it."""

    def call() -> object:
        store: list = []
        handles = []
        for module, _, entries in plan:
            index = entries[0].source

            def hook(module, args, output, index=index):
                store.append(output[index] if isinstance(output, tuple) else output)

            handles.append(module.register_forward_hook(hook))
        try:
            return model(input_ids=ids)
        finally:
            for handle in handles:
                handle.remove()

    return call


def _main(output: object) -> object:
    return output[0] if isinstance(output, tuple) else output


def _task_hooks(model, modules: list, ids, last: bool | str) -> Callable[[], object]:
    """A forward with hooks on `modules` appending their main output (its last position, a view, when
    `last`; a copy of it when `last` is "copy", as the recorder keeps and peers.py's hooks do),
    registered and removed around it (the baseline of T2 and T3)."""

    def whole(module, args, output, store=None):
        store.append(_main(output))

    def last_position(module, args, output, store=None):
        store.append(_main(output)[:, -1:])

    def last_copied(module, args, output, store=None):
        store.append(_main(output)[:, -1:].clone())

    def call() -> object:
        store: list = []
        hook = partial(last_copied if last == "copy" else last_position if last else whole, store=store)
        handles = [module.register_forward_hook(hook) for module in modules]
        try:
            return model(input_ids=ids)
        finally:
            for handle in handles:
                handle.remove()

    return call


def _tasks(model, ids, block) -> dict[str, Callable[[], object]]:
    """The T2 and T3 rows (peers.py's tasks), each task's hooks first: `task: name`."""
    from transformers.models.llama import modeling_llama as llama

    from yamltrace import OutputRecorder

    layers = list(model.layers)
    modules = [m for layer in layers for m in (layer, layer.self_attn, layer.mlp)]
    t2 = {
        "resid": OutputRecorder(llama.LlamaDecoderLayer, index=0),
        "attn": OutputRecorder(llama.LlamaAttention, index=0),
        "mlp": OutputRecorder(llama.LlamaMLP, index=0),
    }
    t3 = {"resid_last": OutputRecorder(llama.LlamaDecoderLayer, index=0, positions=(-1,))}
    return {
        f"T2: {len(modules)} forward hooks appending each layer's, attention's and MLP's output": _task_hooks(
            model, modules, ids, last=False
        ),
        "T2: one trace(model, dict: layers, attention, MLP) block per forward": block(t2),
        f"T3: {len(layers)} forward hooks appending each layer's output[:, -1:]": _task_hooks(model, layers, ids, last=True),
        "T3: one trace(model, dict: layers' positions [-1]) block per forward": block(t3),
        f"T3: {len(layers)} forward hooks appending a copy of each layer's output[:, -1:]": _task_hooks(
            model, layers, ids, last="copy"
        ),
    }


def _nothing(module, args, output) -> None:
    return None


def variants(model, ids, spec_path: str) -> dict[str, Callable[[], object]]:
    """Every variant of the section, by name (the raw forward first)."""
    from transformers.models.llama import modeling_llama as llama

    import yamltrace
    from yamltrace.engine import normalize_output_map, own_output_map, plan_hooks

    plan = plan_hooks(model, normalize_output_map(own_output_map(model)), nested_maps=True)
    as_dict = {"hidden_states": llama.LlamaDecoderLayer, "attentions": llama.LlamaAttention}

    def block(spec: object, outputs: list[str] | None = None) -> Callable[[], object]:
        def call() -> object:
            with yamltrace.trace(model, spec, outputs=outputs) as captures:
                model(input_ids=ids)
            return captures

        return call

    def empty() -> object:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", yamltrace.NeverRanWarning)  # (it says the block made no call)
            with yamltrace.trace(model) as captures:
                pass
        return captures

    def registered() -> object:
        handles = [row[0].register_forward_hook(_nothing) for row in plan]
        for handle in handles:
            handle.remove()
        return handles

    return {
        "raw forward": lambda: model(input_ids=ids),
        f"{len(plan)} forward hooks appending what the recorder keeps, registered and removed around each forward": _hooks(
            model, plan, ids
        ),
        "one trace(model) block per forward": block(None),
        "one trace(model, dict spec) block per forward": block(as_dict),
        "one trace(model, spec file) block per forward": block(spec_path),
        "one trace(model, 'builtin:llama', outputs=2 keys) block per forward": block(
            "builtin:llama", ["hidden_states", "attentions"]
        ),
        "empty trace(model) block, no forward": empty,
        f"empty: {len(plan)} forward hooks registered and removed, no forward (torch's part of any block)": registered,
        **_tasks(model, ids, block),
    }


def _task(name: str) -> str:
    """The task of a row: `T2`, `T3`, or `T1` (the rows without a prefix)."""
    prefix = name.split(":", 1)[0]
    return prefix if prefix in ("T2", "T3") else "T1"


def measure(counter: icount.Counter, layers: int, only: list[str] | None = None) -> dict[str, float]:
    """Instructions per call of every variant (or of those whose name holds one of `only`, beside the
    raw forward and the hooks): the raw forward's median, the others' added medians."""
    import torch

    torch.set_num_threads(1)
    model = icount._models(layers)["raw"]
    ids = icount.harness_ids()
    with tempfile.TemporaryDirectory() as folder:
        spec_path = os.path.join(folder, "spec.yaml")
        Path(spec_path).write_text(_SPEC_FILE, encoding="utf-8")
        calls = variants(model, ids, spec_path)
        if only:
            names = list(calls)[:2]
            calls = {name: call for name, call in calls.items() if name in names or any(word in name for word in only)}
        rounds: dict[str, list[float]] = {name: [] for name in calls}
        with torch.inference_mode():
            for _ in range(ROUNDS):
                for name, call in calls.items():
                    rounds[name].append(counter.per_call(call))
    raw = rounds.pop("raw forward")
    figures = {"raw forward": statistics.median(raw)}
    for name, values in rounds.items():
        if name.startswith("empty"):
            figures[name] = statistics.median(values)
        else:
            figures[name] = statistics.median(v - r for v, r in zip(values, raw))
    return figures


def report(layers: int, figures: dict[str, float], counter: icount.Counter) -> str:
    raw = figures["raw forward"]
    hooks: dict[str, float] = {}  # each task's hooks' added cost (the first hooks row of the task)
    for name, value in figures.items():
        if "forward hooks" in name:
            hooks.setdefault(_task(name), value)
    lines = [
        f"\n## One trace block per forward, LlamaModel, {layers} layers (instructions; N={counter.n}, k={counter.k}, "
        f"{ROUNDS} rounds)\n",
        "| variant | added per forward | ÷ raw forward | ÷ its task's hooks' added |",
        "|---|---|---|---|",
        f"| raw forward | {raw:,.0f} (the forward) | | |",
    ]
    for name, value in figures.items():
        if name == "raw forward":
            continue
        base = hooks.get(_task(name))
        ratio = "" if name.startswith("empty") or base is None else f"{value / base:.3f}"
        lines.append(f"| {name} | {value:+,.0f} | {value / raw:.4f} | {ratio} |")
    lines.append("\n(the empty block's figure is its whole cost; budget: block ÷ hooks ≤ 1.2, empty ÷ raw ≤ 0.02)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--k", type=int, default=1)
    parser.add_argument("--only", nargs="+", help="measure only the variants whose name holds one of these words")
    args = parser.parse_args(argv)
    counter = icount.worker_counter(args.n, args.k)
    if counter is not None:
        (layers,) = args.layers
        print(report(layers, measure(counter, layers, args.only), counter), flush=True)
        return 0
    return icount.run_workers(__file__, args.layers, args.n, args.k, ["--only", *args.only] if args.only else None)


if __name__ == "__main__":
    sys.exit(main())
