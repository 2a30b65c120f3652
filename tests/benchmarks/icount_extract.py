"""Instructions per batch of `extract`, beside a plain forward and one `trace` block per forward.

The tiny model and batches of `bench_extract.py` (4 x 16 tokens, every layer's hidden state). Rows:
a plain `model(**batch)`; `with trace(model, spec): model(**batch)`; a forward in one open
`tracing.stepwise` block and its `take()` (how `extract` captures a batch); and `extract` itself, per batch: (instructions of a run over
n + k batches - those of a run over k) / n, so the run's fixed cost (lock, fingerprint, index) cancels;
the writer thread is counted (callgrind counts every thread). The fixed cost of a k-batch run is
printed too. The rows are measured in `--rounds` interleaved rounds (default 3) and reported as
medians, with extract's throughput against the plain loop per round (plain ÷ extract, same round):
between processes the plain forward alone moves by up to ±40 k (heap history), as much as what is
measured. Run: `python tests/benchmarks/icount_extract.py [--n 30 --k 10 --rounds 3]` (under
callgrind, a few minutes per round on one core; see icount.py), on an otherwise idle machine: the
writer thread runs on the real clock, and another busy process moves the `extract` row by up to
+50 k. Asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import icount


def measure(counter: icount.Counter, count_rounds: int) -> list[dict[str, float]]:
    """Per round, {row: instructions} for each variant; the model is the default TinyModel of bench_extract."""
    import torch
    from bench_extract import _batches, _model_and_spec

    from yamltrace import trace
    from yamltrace.extraction import extract
    from yamltrace.tracing import stepwise

    torch.set_num_threads(1)
    model, spec = _model_and_spec({})
    batches = list(_batches(counter.n + counter.k + 4, 4, 16))
    turn = itertools.cycle(batches)

    def plain() -> None:
        model(**next(turn))

    def traced() -> None:
        with trace(model, spec):
            model(**next(turn))

    steps = stepwise(model, spec)

    def stepped() -> None:
        model(**next(turn))
        steps.take()

    out = Path(tempfile.mkdtemp(prefix="icount-extract-")) / "out"

    def run(count: int) -> Callable[[], None]:
        def call() -> None:
            shutil.rmtree(out, ignore_errors=True)
            extract(model, spec, batches[:count], out, progress=False, shard_bytes=8 * 2**20)

        return call

    rounds: list[dict[str, float]] = []
    for _ in range(count_rounds):
        row: dict[str, float] = {}
        with torch.inference_mode():
            for name, call in (("plain forward", plain), ("trace block + forward", traced)):
                row[name] = counter.per_call(call)
            with steps:
                row["forward + take() in an open stepwise block"] = counter.per_call(stepped)
        run(counter.k)()
        long, _ = counter.count(run(counter.n + counter.k), 1)
        short, _ = counter.count(run(counter.k), 1)
        per_batch = (long - short) / counter.n
        row["extract, per batch"] = per_batch
        row[f"extract, fixed cost of a {counter.k}-batch run"] = short - counter.k * per_batch
        rounds.append(row)
    shutil.rmtree(out.parent, ignore_errors=True)
    return rounds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[4], help=argparse.SUPPRESS)  # run_workers passes it
    parser.add_argument("--n", type=int, default=30, help="batches measured (the difference of two runs)")
    parser.add_argument("--k", type=int, default=10, help="batches of the shorter run")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (medians are reported)")
    args = parser.parse_args(argv)
    counter = icount.worker_counter(args.n, args.k)
    if counter is None:
        return icount.run_workers(__file__, args.layers[:1], args.n, args.k, ["--rounds", str(args.rounds)])
    rounds = measure(counter, args.rounds)
    medians = {name: statistics.median(r[name] for r in rounds) for name in rounds[0]}
    plain = medians["plain forward"]
    print(f"| tiny TinyModel, batch 4 x 16 (median of {len(rounds)} rounds) | instructions | vs plain |\n|---|---|---|")
    for name, count in medians.items():
        print(f"| {name} | {count / 1e6:.3f} M | {count / plain:.3f} |", flush=True)
    throughput = [r["plain forward"] / r["extract, per batch"] for r in rounds]
    print(
        f"\nextract throughput ÷ a plain loop, per round (plain ÷ extract): {', '.join(f'{t:.3f}' for t in throughput)}; "
        f"median {statistics.median(throughput):.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
