"""ruff over the repository (ruff.toml): the lint rules, the size rules for the library's functions
(branches, statements), and the formatter's layout. `ruff check --fix` and `ruff format` mend most."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT


def _ruff() -> str:
    found = shutil.which("ruff", path=str(Path(sys.executable).parent))
    assert found is not None, "ruff is a test dependency (pyproject [test])"
    return found


@pytest.mark.parametrize(
    "command", [["check", "--no-cache", "."], ["format", "--no-cache", "--check", "."]], ids=["check", "format"]
)
def test_ruff_is_clean(command: list[str]) -> None:
    result = subprocess.run([_ruff(), *command], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_size_rules_hold_for_the_library() -> None:
    """The library's functions stay small: a long function fails the check above, so its rules must hold here."""
    config = (ROOT / "ruff.toml").read_text(encoding="utf-8")
    assert '"C90", "PLR0915"' in config and "max-complexity = 15" in config and "max-statements = 50" in config
    assert '"yamltrace/' not in config.split("[lint.per-file-ignores]")[1].split("[lint.mccabe]")[0]
