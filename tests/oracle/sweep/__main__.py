"""`python -m oracle.sweep` (from the repository root, with `tests` on PYTHONPATH; see `make fidelity`).

Enumerates the classes, compares them in a process pool and writes the report (default
`docs/fidelity.md`: the installed transformers version's section, the other versions' kept) and,
with `--json`, the raw results.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict

os.environ["HF_HUB_OFFLINE"] = "1"  # nothing is downloaded, ever
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m oracle.sweep", description=__doc__)
    parser.add_argument("--families", help="comma-separated transformers.models package names (default: all)")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--timeout", type=int, default=60, help="seconds per class (default 60)")
    parser.add_argument("--out", default="docs/fidelity.md", help="report path (default docs/fidelity.md)")
    parser.add_argument("--json", help="also write the raw results here")
    parser.add_argument("--from-json", help="only render the report from results a --json run wrote")
    args = parser.parse_args(argv)

    import warnings

    warnings.filterwarnings("ignore")
    import torch
    import transformers

    from ._compare import Result
    from ._enumerate import enumerate_targets, import_failures
    from ._pool import run_all
    from ._report import render, totals

    versions = f"transformers {transformers.__version__}, torch {torch.__version__}"
    if args.from_json:
        with open(args.from_json, encoding="utf-8") as handle:
            saved = json.load(handle)
        results = [Result(**r) for r in saved["results"]]
        section = render(results, versions=versions, import_failures=saved["import_failures"], seconds=saved["seconds"])
        _write(args.out, section)
        return 0

    started = time.monotonic()
    families = tuple(args.families.split(",")) if args.families else None
    targets = enumerate_targets(families)
    print(f"{len(targets)} classes; {args.jobs} workers, {args.timeout} s each", file=sys.stderr)

    def progress(result) -> None:
        outcome = " ".join(f"{v}={o.split(':')[0]}" for v, o in result.variants.items()) or result.reason[:80]
        print(f"{result.status:10} {result.target}: {outcome}", file=sys.stderr, flush=True)

    results = run_all(targets, jobs=args.jobs, timeout_s=args.timeout, progress=progress)
    seconds = time.monotonic() - started
    _write(args.out, render(results, versions=versions, import_failures=import_failures(), seconds=seconds))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            saved = {"seconds": seconds, "import_failures": import_failures(), "results": [asdict(r) for r in results]}
            json.dump(saved, handle, indent=1)
    print(json.dumps(totals(results)), file=sys.stderr)
    return 0


def _write(path: str, section: str) -> None:
    """Write the report page at `path`: this version's `section`, the other versions' kept."""
    from ._report import page

    existing = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(page(section, existing))


if __name__ == "__main__":
    sys.exit(main())
