"""`mypy --strict` over the whole package, with the project's configuration (pyproject's [tool.mypy]).

mypy runs once per session. A cold run analyses torch's annotations too and takes about 35 s of CPU
(over 60 s of wall time on a loaded 2-core machine); its incremental cache (`.mypy_cache/` at the
repository root, ignored by git) brings a repeated run to about 2 s.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from helpers import ROOT

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def mypy_run() -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "pyproject.toml", "--cache-dir", ".mypy_cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_mypy_ran_over_the_package(mypy_run: subprocess.CompletedProcess[str]) -> None:
    # Exit 1 is "type errors found"; anything else means mypy itself failed (bad config, crash).
    assert mypy_run.returncode in (0, 1), mypy_run.stdout + mypy_run.stderr
    # "Found N errors in M files (checked K source files)" or "Success: no issues found in K source files"
    summary = mypy_run.stdout.strip().splitlines()[-1]
    checked = re.search(r"(?:checked|found in) (\d+) source files", summary)
    assert checked, summary
    assert int(checked[1]) == len(list((ROOT / "yamltrace").rglob("*.py"))), summary


def test_mypy_strict_passes_on_the_whole_package(mypy_run: subprocess.CompletedProcess[str]) -> None:
    assert mypy_run.returncode == 0, mypy_run.stdout + mypy_run.stderr
