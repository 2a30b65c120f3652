"""Figures for docs/security.md's extraction section: hostile data files, each read in a fresh process.

Run from the repository root: `python tests/benchmarks/extract_input_figures.py [--tree DIR] CASE:MB ...`
where CASE is `text` (one text of MB megabytes, tokenised with `--max-length 8`: `open_texts` then the
first batch of `TokenizedBatches`) or `line` (a `.txt` file of one line of MB megabytes, checked by
`open_texts`). `--tree` runs another checkout's yamltrace (the code before a change). Each case prints
`case | outcome | wall s | peak RSS growth MB` (the growth is the peak RSS, reset just before the case,
minus the RSS then, so torch, transformers and writing the file are left out). Not part of the test suite: the numbers depend on
the machine.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap

CASE = r"""
import os, sys, tempfile, time
sys.path.insert(0, os.path.join(os.getcwd(), "tests"))
from helpers_extract import tiny_tokenizer
from pathlib import Path
from yamltrace.extraction._data import TokenizedBatches, load_tokenizer, open_texts
kind, megabytes = sys.argv[1], float(sys.argv[2])
tmp = Path(tempfile.mkdtemp())
tokenizer = load_tokenizer(tiny_tokenizer(tmp / "tok"))
words = b"the cat sat on the mat "
chunk = words * (2**20 // len(words))
with open(tmp / "d.txt", "wb") as f:
    for _ in range(int(megabytes * 1e6 / len(chunk))):
        f.write(chunk)
    f.write(b"\n")
def status_mb(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":")) / 1024
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak (VmHWM) starts again from the current RSS
before, start = status_mb("VmRSS"), time.perf_counter()
try:
    texts = open_texts(tmp / "d.txt")
    outcome = "accepted"
    if kind == "text":
        ids = TokenizedBatches(texts, tokenizer, batch_size=1, max_length=8)[0]["input_ids"]
        outcome = f"tokenised to {list(ids.shape)}"
except Exception as e:
    outcome = f"{type(e).__name__}: {str(e).splitlines()[-1].strip()[:70]}"
wall = time.perf_counter() - start
print(f"{kind}:{megabytes:g} MB | {outcome} | {wall:.2f} s | {status_mb('VmHWM') - before:.0f} MB")
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", default=".", help="the checkout whose yamltrace runs (default: this one)")
    parser.add_argument("--limit", type=float, default=600, help="seconds each case may take")
    parser.add_argument("cases", nargs="+", metavar="CASE:MB")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": os.path.abspath(args.tree), "OMP_NUM_THREADS": "1"}
    for case in args.cases:
        kind, _, megabytes = case.partition(":")
        try:
            result = subprocess.run(
                [sys.executable, "-c", textwrap.dedent(CASE), kind, megabytes],
                capture_output=True, text=True, timeout=args.limit, env=env, cwd=os.path.abspath(args.tree),
            )  # fmt: skip
            print(result.stdout.strip() or f"{case} | failed: {result.stderr.strip().splitlines()[-1:]}", flush=True)
        except subprocess.TimeoutExpired:
            print(f"{case} | still running after {args.limit:.0f} s", flush=True)


if __name__ == "__main__":
    main()
