"""One edit, three ways: add a steering vector to every decoder layer's output of a tiny 8-layer
`LlamaForCausalLM`, with plain forward hooks (registered and removed around each forward), with
`yamltrace.intervene` (a `with` block per forward, as `trace` is used), with `apply_interventions`
(put on once, as a checkpoint load does: the per-forward cost alone), and with nnsight
(`layer.output = layer.output + vector` in a `trace` block). Before timing, every variant's logits are
checked equal (`torch.equal`) to the hooks'; then the variants are timed interleaved in one process
(`harness.compare`, CPU time of one thread), and each is reported as its added cost over the plain
forward (median same-round difference), and yamltrace's over nnsight's (target: <= 0.7).

Not part of the test suite; it needs nnsight (the `bench` extra, `make .venv/.bench`):
`python tests/benchmarks/edits.py [--hidden 64 --seq 16 --calls 20 --rounds 15]`.
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import harness  # noqa: E402
from peers import build_model  # noqa: E402

Tool = Callable[[torch.Tensor], torch.Tensor]


def plain_forward(model) -> Tool:
    return lambda ids: model(ids).logits


def forward_hooks(model, vector: torch.Tensor) -> Tool:
    """The edit as plain forward hooks, registered and removed around each forward."""

    def steer(module, args, output):
        return (output[0] + vector, *output[1:]) if isinstance(output, tuple) else output + vector

    def run(ids: torch.Tensor) -> torch.Tensor:
        handles = [layer.register_forward_hook(steer) for layer in model.model.layers]
        try:
            return model(ids).logits
        finally:
            for handle in handles:
                handle.remove()

    return run


def yamltrace_tool(model, vector: torch.Tensor) -> Tool:
    import yamltrace
    from yamltrace.engine import Intervention, OutputRecorder

    layer = type(model.model.layers[0])
    spec = yamltrace.Spec(outputs={}, interventions=[Intervention("steer", OutputRecorder(layer), "add", vector)])

    def run(ids: torch.Tensor) -> torch.Tensor:
        with yamltrace.intervene(model, spec):
            return model(ids).logits

    return run


def yamltrace_persistent(model, vector: torch.Tensor) -> Tool:
    """The same spec put on (a copy of) the model once with `apply_interventions`, as a checkpoint load does."""
    import yamltrace
    from yamltrace.engine import Intervention, OutputRecorder

    layer = type(model.model.layers[0])
    spec = yamltrace.Spec(outputs={}, interventions=[Intervention("steer", OutputRecorder(layer), "add", vector)])
    yamltrace.apply_interventions(model, spec)
    return lambda ids: model(ids).logits


def nnsight_tool(model, vector: torch.Tensor) -> Tool:
    from nnsight import NNsight

    wrapped = NNsight(model)
    layers = wrapped.model.layers

    def run(ids: torch.Tensor) -> torch.Tensor:
        with wrapped.trace(ids):
            for layer in layers:
                layer.output = layer.output + vector
            logits = wrapped.output.logits.save()
        return logits

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--seq", type=int, default=16)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    model = build_model(args.hidden)
    vector = torch.randn(args.hidden, generator=torch.Generator().manual_seed(2))
    ids = torch.randint(0, 128, (1, args.seq), generator=torch.Generator().manual_seed(1))
    variants = {
        "plain forward": plain_forward(model),
        "forward hooks": forward_hooks(model, vector),
        "yamltrace intervene": yamltrace_tool(model, vector),
        "yamltrace apply_interventions (once)": yamltrace_persistent(copy.deepcopy(model), vector),
        "nnsight": nnsight_tool(copy.deepcopy(model), vector),
    }
    with torch.no_grad():
        expected = variants["forward hooks"](ids)
        assert not torch.equal(expected, variants["plain forward"](ids)), "the edit should change the logits"
        for name, tool in variants.items():
            if name != "plain forward" and not torch.equal(tool(ids), expected):
                raise SystemExit(f"{name} edited something else than the forward hooks")
        timing = harness.compare(
            {name: (lambda t=tool: t(ids)) for name, tool in variants.items()}, calls=args.calls, rounds=args.rounds
        )
    print(f"8 layers, hidden {args.hidden}, seq {args.seq}; CPU time of one thread, median of {args.rounds} rounds")
    print("| variant | ÷ plain forward | added per forward (µs) |")
    print("|---|---|---|")
    for name in list(variants)[1:]:
        added = timing.added(name, "plain forward")
        print(f"| {name} | {timing.paired_ratio(name, 'plain forward'):.2f} | {added * 1e6:,.0f} |")
    ours, theirs = timing.added("yamltrace intervene", "plain forward"), timing.added("nnsight", "plain forward")
    print(f"| yamltrace added ÷ nnsight added | {ours / theirs:.2f} | target <= 0.7 |")


if __name__ == "__main__":
    main()
