"""Benchmarks (`make bench`): not part of the default test run (pytest's `norecursedirs`).

Files named `bench_*.py` here are collected as test modules, besides the usual `test_*.py`. The
figures each benchmark records are printed together at the end of the session.
"""

from __future__ import annotations

import platform
import sys
from datetime import date
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import harness  # noqa: E402


def pytest_collect_file(parent: pytest.Collector, file_path: Path):
    # A file named on the command line is collected by pytest itself.
    if file_path.suffix == ".py" and file_path.name.startswith("bench_") and not parent.session.isinitpath(file_path):
        return pytest.Module.from_parent(parent, path=file_path)
    return None


def pytest_terminal_summary(terminalreporter) -> None:
    if not harness.RESULTS:
        return
    import torch
    import transformers

    write = terminalreporter.write_line
    write("")
    write(
        f"yamltrace benchmarks — {date.today().isoformat()}, torch {torch.__version__}, "
        f"transformers {transformers.__version__}, Python {platform.python_version()}, 1 thread"
    )
    write(f"| {'benchmark':<22} | {'figure':<58} | {'value':<26} | {'target':<10} |")
    write(f"|{'-' * 24}|{'-' * 60}|{'-' * 28}|{'-' * 12}|")
    for benchmark, figure, value, target in harness.RESULTS:
        write(f"| {benchmark:<22} | {figure:<58} | {value:<26} | {target:<10} |")
