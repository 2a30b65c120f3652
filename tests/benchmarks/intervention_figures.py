"""Figures for docs/security.md's section on interventions: the worst specs `load_spec` accepts for
their tensor files, each loaded in a fresh process, with the call's wall time, CPU time and peak memory.

Run from the repository root: `python tests/benchmarks/intervention_figures.py [--work DIR]`. Linux only.
Prints `case | interventions | wall s | CPU s | peak RSS growth MB` (the growth is the peak RSS minus the
peak after the imports). Not part of the test suite: the numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from safetensors.torch import save_file

from yamltrace.spec._limits import MAX_INTERVENTIONS, MAX_TENSOR_BYTES, MAX_TENSOR_FILES

PROBE = r"""
import sys, time
import torch, yamltrace
from yamltrace import load_spec
def peak_kb():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
base = peak_kb()
wall, cpu = time.perf_counter(), time.process_time()
spec = load_spec(sys.argv[1])
for edit in spec.interventions:  # touch every tensor, so mapped pages count
    float(edit.value.sum())
print(len(spec.interventions), f"{time.perf_counter() - wall:.2f}", f"{time.process_time() - cpu:.2f}",
      f"{(peak_kb() - base) / 1024:.0f}")
"""


def _spec(folder: Path, references: list[str]) -> Path:
    lines = ["yamltrace: 1", "interventions:"]
    lines += [f"  e{i}: {{class_name: mlp, add: {{tensor: '{ref}'}}}}" for i, ref in enumerate(references)]
    path = folder / "spec.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def largest_tensors(folder: Path) -> Path:
    """`MAX_TENSOR_FILES` files of one float32 tensor each, `MAX_TENSOR_BYTES` together."""
    folder.mkdir(parents=True, exist_ok=True)
    numbers = MAX_TENSOR_BYTES // MAX_TENSOR_FILES // 4
    for i in range(MAX_TENSOR_FILES):
        save_file({"v": torch.ones(numbers)}, str(folder / f"f{i}.safetensors"))
    return _spec(folder, [f"f{i}.safetensors:v" for i in range(MAX_TENSOR_FILES)])


def largest_headers(folder: Path) -> Path:
    """`MAX_INTERVENTIONS` tensors of `MAX_TENSOR_FILES` files whose headers are just under the cap."""
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(MAX_TENSOR_FILES):
        save_file({f"t{j:05d}": torch.ones(1) for j in range(3300)}, str(folder / f"f{i}.safetensors"))
    return _spec(folder, [f"f{k % MAX_TENSOR_FILES}.safetensors:t{k * 50:05d}" for k in range(MAX_INTERVENTIONS)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=None, help="folder for the files (default: a temporary one)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="yamltrace-edit-figures-"))
    for name, make in (("largest tensors", largest_tensors), ("largest headers", largest_headers)):
        spec = make(work / name.replace(" ", "-"))
        result = subprocess.run([sys.executable, "-c", PROBE, str(spec)], capture_output=True, text=True, check=True)
        print(f"{name} | {' | '.join(result.stdout.split())}")


if __name__ == "__main__":
    main()
