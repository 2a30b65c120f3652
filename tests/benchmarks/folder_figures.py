"""Figures for docs/security.md's section on checkpoint and activations folders: hostile folders opened in
a fresh process each, with the call's wall time and peak memory.

Run from the repository root: `python tests/benchmarks/folder_figures.py [--root CHECKOUT] [--work DIR]`.
`--root` is the checkout whose yamltrace is measured (default: this one; pass an older checkout for the
"before" column). Linux only. Prints `case | outcome | wall s | peak RSS growth MB` (the growth is the peak
RSS minus the peak after the imports, so torch's own ~220 MB is left out). Not part of the test suite: the numbers
depend on the machine. The files are written once into `--work` (about 700 MB of disk) and reused.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

# The peak is read from /proc/self/status (VmHWM, Linux): ru_maxrss would start at the parent's peak.
PROBE = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
import torch, yamltrace.extraction, yamltrace.cli._files
def peak_kb():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
kind, target = sys.argv[2], sys.argv[3]
base = peak_kb()
start = time.perf_counter()
try:
    if kind == "index":
        outcome = f"opened, {len(yamltrace.extraction.open_activations(target)):,} rows"
    else:
        found = yamltrace.cli._files.expand([target])
        outcome = f"{sum(t.problem is None for t in found):,} files read, {sum(t.problem is not None for t in found)} reported"
except Exception as e:
    outcome = f"{type(e).__name__}: {str(e)[len(target) + 1:][:70]}"
wall = time.perf_counter() - start
growth = (peak_kb() - base) / 1024
print(f"{outcome} | {wall:.2f} s | {growth:.0f} MB")
"""


def _index(directory: Path, megabytes: int) -> Path:
    """An index.json as `build_index` writes it (indent 1), of about `megabytes` MiB."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "index.json"
    if not path.exists():
        n = megabytes * 2**20 // len(" [\n  0,\n  1234567,\n  8\n ],\n")
        head = {"format": "yamltrace-activations", "format_version": 1, "rows": 8 * n,
                "keys": {"hidden_states": {"layers": [0], "row_shape": [4], "dtype": "F32"}},
                "shards": [{"file": "shard-r000-00000.safetensors", "rows": 8 * n}]}  # fmt: skip
        with open(path, "w") as f:
            f.write(json.dumps(head)[:-1] + ', "batches": [\n')
            f.writelines(f" [\n  0,\n  {8 * i},\n  8\n ]{',' if i < n - 1 else ''}\n" for i in range(n))
            f.write('], "run": {}, "fingerprint": ""}\n')
    return directory


def _bomb(directory: Path, item: bytes) -> Path:
    """A JSON list of `item` repeated up to just under 64 MiB (the index cap)."""
    directory.mkdir(parents=True, exist_ok=True)
    if not (directory / "index.json").exists():
        n = (64 * 2**20 - 2) // (len(item) + 1)
        (directory / "index.json").write_bytes(b"[" + b",".join([item] * n) + b"]")
    return directory


def _dag(directory: Path, depth: int = 16) -> Path:
    """Level i holds a spec and two links to level i+1: 2**depth paths, depth + 1 directories."""
    if not directory.exists():
        for level in range(depth + 1):
            (directory / f"level{level}").mkdir(parents=True)
            (directory / f"level{level}" / "spec.yaml").write_text("yamltrace: 1\n")
        for level in range(depth):
            for link in "ab":
                os.symlink(directory / f"level{level + 1}", directory / f"level{level}" / link)
    return directory / "level0"


def _tree(directory: Path, depth: int = 1500) -> Path:
    if not directory.exists():
        deepest = str(directory)
        os.mkdir(deepest)
        for _ in range(depth):
            deepest = os.path.join(deepest, "d")
            os.mkdir(deepest)
        Path(deepest, "x.yaml").write_text("yamltrace: 1\n")
    return directory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=str(Path(__file__).resolve().parents[2]))
    parser.add_argument("--work", default="/tmp/yamltrace-folder-figures")
    args = parser.parse_args()
    work = Path(args.work)
    cases = {
        "index.json of 400 MiB": ("index", _index(work / "i400", 400)),
        "index.json of 60 MiB (2.3 million batches)": ("index", _index(work / "i60", 60)),
        "64 MiB of [[],[],...]": ("index", _bomb(work / "lists", b"[]")),
        '64 MiB of ["aa","aa",...]': ("index", _bomb(work / "strings", b'"aa"')),
        "64 MiB of [1e9,1e9,...]": ("index", _bomb(work / "numbers", b"1e9")),
        "validate: symlink DAG, 2 links per level, depth 16": ("walk", _dag(work / "dag")),
        "validate: 1,500-level tree": ("walk", _tree(work / "tree")),
    }
    for name, (kind, target) in cases.items():
        result = subprocess.run([sys.executable, "-c", PROBE, args.root, kind, str(target)], capture_output=True, text=True)
        print(f"{name} | {result.stdout.strip() or result.stderr.strip().splitlines()[-1]}")


if __name__ == "__main__":
    main()
