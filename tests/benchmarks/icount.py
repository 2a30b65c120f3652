"""Instructions per forward (`make bench-icount`): capture's cost counted by callgrind, not timed.

On a shared machine wall time moves by more than the differences being chased; the number of
instructions a forward executes barely moves. Run: `python tests/benchmarks/icount.py [--layers 8 32]`
(`--section interventions`: that section alone). It builds `callgrind_client.c` (gcc, valgrind
headers) and re-runs itself under `valgrind --tool=callgrind --instr-atstart=no`, once per layer
count; every variant of one layer count is measured in that one process (heap history alone moves
counts by tens of thousands of instructions between processes).

A measurement switches instrumentation on only around the measured calls (client requests
`CALLGRIND_START/STOP_INSTRUMENTATION` from the helper, loaded with ctypes), with the garbage
collector off, after warm-up calls, and dumps the count. A call's cost is
`(count over N + k calls - count over k calls) / N`, so what happens once per measurement (the
loop's set-up, the first call's lazy work) cancels. Results are printed as markdown tables.
Not collected by pytest; asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import copy
import ctypes
import gc
import itertools
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
FLAGS = {"output_hidden_states": True, "output_attentions": True}
TRACE_ROUNDS = 3  # interleaved rounds of the trace section (see measure)
_WORKER = "YAMLTRACE_ICOUNT_WORKER"  # set (to the dump folder) in the process valgrind runs


# ---------------------------------------------------------------------------------------------
# Counting


class Counter:
    """Counts instructions of calls, through callgrind's client requests (see the module docstring)."""

    def __init__(self, library: Path, folder: Path, n: int, k: int) -> None:
        self.lib = ctypes.CDLL(str(library))
        if not self.lib.yt_on_valgrind():
            raise RuntimeError("icount: not running under valgrind")
        self.folder, self.n, self.k = folder, n, k
        self.dumps = 0

    def count(self, call: Callable[[], object], repeats: int) -> tuple[int, int]:
        """Instructions executed by `repeats` calls of `call`: in all, and in libc's allocator."""
        gc.collect()
        gc.disable()
        lib = self.lib
        try:
            lib.yt_zero()
            lib.yt_start()
            for _ in range(repeats):
                call()
            lib.yt_stop()
        finally:
            gc.enable()
        self.dumps += 1
        lib.yt_dump(f"icount-{self.dumps}".encode())
        dump = self.folder / f"callgrind.out.{self.dumps}"
        return _totals(dump), _allocator(dump)

    def per_call(self, call: Callable[[], object], warmup: int = 2) -> float:
        """Instructions per call: (count over n + k calls - count over k calls) / n, after warm-up."""
        return self.per_call_split(call, warmup)[0]

    def per_call_split(self, call: Callable[[], object], warmup: int = 2) -> tuple[float, float]:
        """`per_call`, and the part of it spent in libc's allocator (`_allocator`)."""
        for _ in range(warmup):
            call()
        (long, long_alloc), (short, short_alloc) = self.count(call, self.n + self.k), self.count(call, self.k)
        return (long - short) / self.n, (long_alloc - short_alloc) / self.n


def _totals(path: Path) -> int:
    for line in path.read_text().splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise RuntimeError(f"icount: no totals in {path}")


# libc's allocator: what a forward's tensors cost to allocate and free, which depends on the heap's
# history (which blocks earlier calls kept alive) more than on the code measured.
_ALLOCATOR = re.compile(
    r"(_int_)?(malloc|free|realloc|calloc|memalign)|cfree|posix_memalign|aligned_alloc|_mid_memalign"
    r"|malloc_consolidate|unlink_chunk.*|sysmalloc|systrim|tcache_.*"
)
_NAME = re.compile(r"(c?)(ob|fn)=\((\d+)\)(?: (.*))?")


def _allocator(path: Path) -> int:
    """Instructions a callgrind dump spent in libc's allocator functions themselves (self cost)."""
    names: dict[str, dict[str, str]] = {"ob": {}, "fn": {}}
    obj, inside, skip, total = "", False, False, 0
    with path.open() as lines:
        for line in lines:
            first = line[:1]
            if first.isdigit() or first in "+-*":  # a cost line: position(s), then Ir
                if skip:  # the inclusive cost of the call just named: not this function's own
                    skip = False
                elif inside:
                    total += int(line.split()[-1])
            elif line.startswith("calls="):
                skip = True
            elif match := _NAME.match(line):  # names are given once, then referred to by number
                called, kind, number, name = match.groups()
                if name is not None:
                    names[kind][number] = name.strip()
                if not called and kind == "ob":
                    obj = names["ob"][number]
                elif not called:
                    inside = "/libc.so" in obj and _ALLOCATOR.fullmatch(names["fn"][number]) is not None
    return total


# ---------------------------------------------------------------------------------------------
# Variants


def _models(layers: int) -> dict:
    """harness.llama_variants plus 'raw' (no decorator at all), every one on the same weights."""
    import inspect

    import harness
    from transformers import LlamaModel

    models = harness.llama_variants(layers)

    class RawLlama(LlamaModel):
        forward = inspect.unwrap(LlamaModel.forward)

    raw = RawLlama(harness.llama_config(layers)).eval()
    raw.load_state_dict(models["plain"].state_dict(), assign=True)
    models["raw"] = raw
    return models


def _fresh(template, count: int) -> Iterator:
    """`count` copies of a model that never captured, handed out one per call."""
    return iter([copy.deepcopy(template) for _ in range(count)])


HOOKS = {  # what the forward hooks of the trace section do with a module's output
    "nothing": "doing nothing",
    "output": "appending the output",
    "recorded": "appending what the recorder keeps",
}


def _hook_loop(model, plan, does: str):
    """Forward hooks on the planned modules: doing nothing, appending the whole output, or appending
    the element the recorder keeps (`output[index]` of a tuple, as transformers' own hooks do): the
    same tensors a capture keeps alive, so the forward frees the same ones."""
    store: list = []

    def nothing(module, args, output):
        pass

    def whole(module, args, output):
        store.append(output)

    def recorded(index: int):
        def hook(module, args, output):
            store.append(output[index] if isinstance(output, tuple) else output)

        return hook

    hooks = {"nothing": lambda index: nothing, "output": lambda index: whole, "recorded": recorded}[does]
    return [module.register_forward_hook(hooks(entries[0][1])) for module, _, entries in plan]


def measure(counter: Counter, layers: int) -> list[tuple[str, str, float, str, float]]:
    """Every variant of one layer count: rows (section, variant, instructions per forward, baseline name, added)."""
    import torch

    import yamltrace
    from yamltrace.engine import normalize_output_map, own_output_map, plan_hooks

    torch.set_num_threads(1)
    models = _models(layers)
    ids = harness_ids()
    per: dict[str, float] = {}
    rows: list[tuple[str, str, float, str, float]] = []

    def row(section: str, name: str, call: Callable[[], object], baseline: str | None) -> None:
        with torch.inference_mode():
            per[name] = counter.per_call(call)
        added = per[name] - per[baseline] if baseline else 0.0
        rows.append((section, name, per[name], baseline or "", added))

    m = models
    fresh_count = 2 * counter.k + counter.n + 2  # warm-up + k + (n + k)
    templates = {name: copy.deepcopy(m[name]) for name in ("yamltrace", "plain", "plain_hf")}
    hf_template = type(m["transformers"])(m["transformers"].config).eval()
    hf_template.load_state_dict(m["plain"].state_dict(), assign=True)
    templates["transformers"] = hf_template

    # Off, before anything of yamltrace captured in this process (a lasting process-wide cost
    # shows as the difference with the "after captures" rows below).
    row("off", "raw forward (no decorator)", lambda: m["raw"](input_ids=ids), None)
    row("off", "yamltrace merge only", lambda: m["plain"](input_ids=ids), "raw forward (no decorator)")
    row("off", "yamltrace, capture off", lambda: m["yamltrace"](input_ids=ids), "raw forward (no decorator)")
    row("off", "transformers merge only", lambda: m["plain_hf"](input_ids=ids), "raw forward (no decorator)")
    hf_fresh = _fresh(templates["transformers"], 1)
    hf_no_hooks = next(hf_fresh)
    row("off", "transformers, capture off, no hooks yet", lambda: hf_no_hooks(input_ids=ids), "raw forward (no decorator)")
    row(
        "off",
        "transformers, capture off, hooks installed",
        lambda: m["transformers"](input_ids=ids),
        "raw forward (no decorator)",
    )

    # Decorator path, the evaluation-loop pattern: capturing forward after capturing forward.
    row("repeated", "yamltrace, flags on", lambda: m["yamltrace"](input_ids=ids, **FLAGS), "yamltrace merge only")
    row("repeated", "transformers, flags on", lambda: m["transformers"](input_ids=ids, **FLAGS), "transformers merge only")

    # One capturing forward on a model that never captured, then one forward without capture.
    def once(models: Iterator, flags: dict) -> Callable[[], object]:
        def call() -> None:
            model = next(models)
            model(input_ids=ids, **flags)
            model(input_ids=ids)

        return call

    row("single", "plain (yamltrace merge), two forwards", once(_fresh(templates["plain"], fresh_count), {}), None)
    row(
        "single",
        "yamltrace, capture on then off",
        once(_fresh(templates["yamltrace"], fresh_count), FLAGS),
        "plain (yamltrace merge), two forwards",
    )
    row("single", "plain (transformers merge), two forwards", once(_fresh(templates["plain_hf"], fresh_count), {}), None)
    row(
        "single",
        "transformers, capture on then off",
        once(_fresh(templates["transformers"], fresh_count), FLAGS),
        "plain (transformers merge), two forwards",
    )

    # The same pair on one model, again and again (what the wall-time harness's "on, one forward" runs:
    # it alternates each instance's capture on and off): ours plans from the cache and installs each time.
    row("alternating", "plain (yamltrace merge), two forwards", once(itertools.repeat(m["plain"]), {}), None)
    row(
        "alternating",
        "yamltrace, capture on then off",
        once(itertools.repeat(m["yamltrace"]), FLAGS),
        "plain (yamltrace merge), two forwards",
    )
    row("alternating", "plain (transformers merge), two forwards", once(itertools.repeat(m["plain_hf"]), {}), None)
    row(
        "alternating",
        "transformers, capture on then off",
        once(itertools.repeat(m["transformers"]), FLAGS),
        "plain (transformers merge), two forwards",
    )

    # trace around a loop of forwards, against forward hooks on the same modules. The variants are measured
    # in interleaved rounds, each reported as the median of its same-round differences with the raw loop:
    # a single count of this section moves with the process's history by as much as what is measured.
    model = m["raw"]
    plan = plan_hooks(model, normalize_output_map(own_output_map(model)), nested_maps=True)
    forward = lambda: model(input_ids=ids)  # noqa: E731
    hooks_name = {does: f"{len(plan)} forward hooks {what}" for does, what in HOOKS.items()}
    rounds: dict[str, list[tuple[float, float]]] = {}  # per round: (instructions, of which libc's allocator)
    for _ in range(TRACE_ROUNDS):
        with torch.inference_mode():
            rounds.setdefault("raw forward, loop", []).append(counter.per_call_split(forward))
            for does in HOOKS:
                handles = _hook_loop(model, plan, does)
                rounds.setdefault(hooks_name[does], []).append(counter.per_call_split(forward))
                for handle in handles:
                    handle.remove()
            with yamltrace.trace(model):
                rounds.setdefault("yamltrace.trace(model)", []).append(counter.per_call_split(forward))
    raw_rounds = rounds.pop("raw forward, loop")
    # Each variant in all, then without libc's allocator, whose share moves with the heap's history
    # (docs/performance.md); an added cost is the median of same-round differences.
    for section, part in (("trace", lambda v: v[0]), ("trace, libc allocator left out", lambda v: v[0] - v[1])):
        raw_loop = statistics.median(map(part, raw_rounds))
        rows.append((section, "raw forward, loop", raw_loop, "", 0.0))
        for name, values in rounds.items():
            added = statistics.median(part(value) - part(raw) for value, raw in zip(values, raw_rounds))
            rows.append((section, name, raw_loop + added, "raw forward, loop", added))

    rows.extend(measure_interventions(counter, model, plan, forward))

    # Off again, after every kind of capture ran in this process.
    row("off after captures", "raw forward (no decorator)", lambda: m["raw"](input_ids=ids), None)
    row("off after captures", "yamltrace, capture off", lambda: m["yamltrace"](input_ids=ids), "raw forward (no decorator)")
    return rows


EDIT_HOOKS = "forward hooks adding a vector"
EDIT_OURS = "yamltrace.intervene(model, add: vector)"


def measure_interventions(counter: Counter, model, plan, forward) -> list[tuple[str, str, float, str, float]]:
    """The `interventions` section: one edit (add a vector to every decoder layer's output), as
    plain forward hooks and as `intervene`, each against the raw loop, in interleaved rounds (the
    median of same-round differences, as the trace section)."""
    import torch

    import yamltrace
    from yamltrace.engine import Intervention, OutputRecorder

    layers = [module for module, path, _ in plan if path.count(".") == 2 and ".layers." in path]
    vector = torch.randn(model.config.hidden_size)
    spec = yamltrace.Spec(outputs={}, interventions=[Intervention("steer", OutputRecorder(type(layers[0])), "add", vector)])

    def add(module, args, output):
        return output + vector

    rounds: dict[str, list[tuple[float, float]]] = {}  # per round: (instructions, of which libc's allocator)
    for _ in range(TRACE_ROUNDS):
        with torch.inference_mode():
            rounds.setdefault("raw", []).append(counter.per_call_split(forward))
            handles = [layer.register_forward_hook(add) for layer in layers]
            rounds.setdefault(f"{len(layers)} {EDIT_HOOKS}", []).append(counter.per_call_split(forward))
            for handle in handles:
                handle.remove()
            with yamltrace.intervene(model, spec):
                rounds.setdefault(EDIT_OURS, []).append(counter.per_call_split(forward))
    raw = rounds.pop("raw")
    rows = []
    for section, part in (("interventions", lambda v: v[0]), ("interventions, libc allocator left out", lambda v: v[0] - v[1])):
        raw_loop = statistics.median(map(part, raw))
        rows.append((section, "raw forward, loop", raw_loop, "", 0.0))
        for name, values in rounds.items():
            added = statistics.median(part(value) - part(base) for value, base in zip(values, raw))
            rows.append((section, name, raw_loop + added, "raw forward, loop", added))
    return rows


def intervention_ratio(rows: list) -> str:
    """The ratio lines of the `interventions` sections: intervene's added cost over the hooks'."""
    lines = []
    for section, target in (("interventions", "<= 1.15"), ("interventions, libc allocator left out", "—")):
        added = {name: a for s, name, _, _, a in rows if s == section}
        hooks = next(a for name, a in added.items() if name.endswith(EDIT_HOOKS))
        lines.append(f"| {section}: yamltrace added / {EDIT_HOOKS} added | {added[EDIT_OURS] / hooks:.3f} | {target} |")
    return "\n".join(lines)


def measure_interventions_alone(counter: Counter, layers: int) -> list[tuple[str, str, float, str, float]]:
    """The `interventions` section alone (`--section interventions`), on the raw model of `_models`."""
    import torch

    from yamltrace.engine import normalize_output_map, own_output_map, plan_hooks

    torch.set_num_threads(1)
    model = _models(layers)["raw"]
    plan = plan_hooks(model, normalize_output_map(own_output_map(model)), nested_maps=True)
    ids = harness_ids()
    return measure_interventions(counter, model, plan, lambda: model(input_ids=ids))


def harness_ids():
    import harness

    return harness.input_ids()


def _hooked(rows: list) -> int:
    """How many modules the trace section hooked (from its row names)."""
    name = next(name for section, name, *_ in rows if section == "trace" and name.endswith(HOOKS["nothing"]))
    return int(name.split()[0])


def table(layers: int, rows: list, counter: Counter) -> list[str]:
    """The rows as a markdown table, each added cost also relative to its section's raw forward."""
    raw = {s: p for s, name, p, _, _ in rows if name.startswith("raw forward")}
    lines = [
        f"\n## LlamaModel, {layers} layers (instructions per forward; N={counter.n}, k={counter.k})\n",
        "| section | variant | instructions | added over | added | added / raw |",
        "|---|---|---|---|---|---|",
    ]
    for section, name, value, baseline, add in rows:
        base = raw.get(section) or raw.get("off")
        lines.append(
            f"| {section} | {name} | {value:,.0f} | {baseline or '—'} | {add:+,.0f} | {add / base:+.4f} |"
            if baseline
            else f"| {section} | {name} | {value:,.0f} | — | | |"
        )
    return lines


def report(layers: int, rows: list, counter: Counter) -> str:
    raw = {s: p for s, name, p, _, _ in rows if name.startswith("raw forward")}
    added = {(s, name): a for s, name, _, _, a in rows}
    lines = table(layers, rows, counter)
    ratios = [
        (
            "repeated: yamltrace added / transformers added",
            ("repeated", "yamltrace, flags on"),
            ("repeated", "transformers, flags on"),
            "<= 1.0",
        ),
        (
            "single (not a target): yamltrace added / transformers added",
            ("single", "yamltrace, capture on then off"),
            ("single", "transformers, capture on then off"),
            "—",
        ),
        (
            "alternating (not a target): yamltrace added / transformers added",
            ("alternating", "yamltrace, capture on then off"),
            ("alternating", "transformers, capture on then off"),
            "—",
        ),
    ]
    for section in ("trace", "trace, libc allocator left out"):
        for does in ("output", "recorded"):
            title = f"{section}: yamltrace added / hooks {HOOKS[does]} added"
            ratios.append(
                (
                    title,
                    (section, "yamltrace.trace(model)"),
                    (section, f"{_hooked(rows)} forward hooks {HOOKS[does]}"),
                    "<= 1.1" if section == "trace" else "—",
                )
            )
    lines.append("\n| ratio | value | target |\n|---|---|---|")
    for title, ours, theirs, target in ratios:
        lines.append(f"| {title} | {added[ours] / added[theirs]:.3f} | {target} |")
    lines.append(intervention_ratio(rows))
    off = rows[[r[:2] for r in rows].index(("off", "yamltrace, capture off"))][2] / raw["off"]
    lines.append(f"| off: yamltrace capture off / raw | {off:.4f} | <= 1.01 |")
    lines.append(f"| off: raw forward after captures - before | {raw['off after captures'] - raw['off']:+,.0f} | ~0 |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Driver


def build_client(folder: Path) -> Path:
    library = folder / "callgrind_client.so"
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(library), str(HERE / "callgrind_client.c")], check=True)
    return library


def worker_counter(n: int, k: int) -> Counter | None:
    """In the process valgrind runs: a `Counter` (and the benchmarks folder on `sys.path`); else None."""
    folder = os.environ.get(_WORKER)
    if not folder:
        return None
    sys.path.insert(0, str(HERE))
    return Counter(Path(folder) / "callgrind_client.so", Path(folder), n, k)


def run_workers(script: str, layers: list[int], n: int, k: int, extra: list[str] | None = None) -> int:
    """Re-run `script` under callgrind, one process per layer count (it finds its `Counter` through
    `worker_counter`); a message and 0 where valgrind or gcc is missing."""
    missing = [tool for tool in ("valgrind", "gcc") if shutil.which(tool) is None]
    if missing:
        print(f"bench-icount: skipped, {' and '.join(missing)} not found (install valgrind and gcc to run it).")
        return 0
    status = 0
    for count in layers:
        with tempfile.TemporaryDirectory(prefix="yamltrace-icount-") as tmp:
            build_client(Path(tmp))
            env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", **{_WORKER: tmp})
            command = [
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",
                f"--callgrind-out-file={tmp}/callgrind.out",
                "--log-file=" + f"{tmp}/valgrind.log",
                sys.executable,
                script,
                "--layers",
                str(count),
                "--n",
                str(n),
                "--k",
                str(k),
                *(extra or []),
            ]
            result = subprocess.run(command, env=env, cwd=ROOT)
            if result.returncode:
                print(Path(tmp, "valgrind.log").read_text()[-3000:], file=sys.stderr)
                status = result.returncode
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--n", type=int, default=6, help="calls measured (the difference of two counts)")
    parser.add_argument("--k", type=int, default=1, help="calls of the shorter count")
    parser.add_argument("--section", choices=("all", "interventions"), default="all", help="measure every section, or one alone")
    args = parser.parse_args(argv)
    counter = worker_counter(args.n, args.k)
    if counter is not None:
        (layers,) = args.layers
        if args.section == "interventions":
            rows = measure_interventions_alone(counter, layers)
            print(
                "\n".join(
                    [*table(layers, rows, counter), "\n| ratio | value | target |\n|---|---|---|", intervention_ratio(rows)]
                )
            )
        else:
            print(report(layers, measure(counter, layers), counter), flush=True)
        return 0
    return run_workers(__file__, args.layers, args.n, args.k, ["--section", args.section])


if __name__ == "__main__":
    sys.exit(main())
