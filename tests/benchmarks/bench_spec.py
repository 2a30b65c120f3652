"""Spec load: `load_spec` of a shipped spec, warm; `validate_spec` of every spec in a fresh process."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from harness import compare, record

from yamltrace.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
SPECS = sorted((ROOT / "specs").glob("*.yaml"))


def test_load_spec_warm() -> None:
    path = ROOT / "specs" / "tiny.yaml"
    load_spec(path)  # imports, the compiled schema and the class registry are warm from here on
    timing = compare({"load_spec(specs/tiny.yaml)": lambda: load_spec(path)}, calls=20, rounds=21)
    print(timing.table("spec load, warm"))
    record(
        "spec load", "load_spec(specs/tiny.yaml), warm", f"{timing.median('load_spec(specs/tiny.yaml)') * 1e3:.2f} ms", "<= 2 ms"
    )


_FRESH = """
import json, sys, time
start = time.perf_counter()
from yamltrace.spec import validate_spec
for path in sys.argv[1:]:
    validate_spec(path)
print(json.dumps({"seconds": time.perf_counter() - start, "torch": "torch" in sys.modules}))
"""


def test_validate_every_spec_fresh_process() -> None:
    assert SPECS, "specs/ holds no *.yaml"
    walls, inner, torch_loaded = [], [], set()
    for _ in range(7):
        start = time.perf_counter()
        result = subprocess.run(
            [sys.executable, "-c", _FRESH, *map(str, SPECS)], capture_output=True, text=True, timeout=120, cwd=ROOT
        )
        walls.append(time.perf_counter() - start)
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout.strip().splitlines()[-1])
        inner.append(report["seconds"])
        torch_loaded.add(report["torch"])
    print(
        f"\n   fresh `python -c` validating {len(SPECS)} specs: wall median {statistics.median(walls):.3f} s, "
        f"max {max(walls):.3f} s; import + validate inside the process {statistics.median(inner):.3f} s"
    )
    assert torch_loaded == {False}, "validate_spec imported torch"
    bench = "spec validate (fresh)"
    record(
        bench,
        f"validate_spec of all {len(SPECS)} specs/, fresh process, wall (median of 7)",
        f"{statistics.median(walls):.3f} s (max {max(walls):.3f})",
        "< 0.5 s",
    )
    record(bench, "'torch' in sys.modules after validating", "False")
