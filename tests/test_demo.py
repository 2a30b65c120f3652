"""The README's first command: the demo runs, prints the table and exits 0."""

from __future__ import annotations

import subprocess
import sys


def test_demo_prints_capture_table_and_exits_zero() -> None:
    result = subprocess.run([sys.executable, "-m", "yamltrace.demo"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any(line.split()[:3] == ["hidden_states", "5", "2x8x32"] for line in lines if line.strip())
    assert any(line.split()[:3] == ["attentions", "4", "2x4x8x8"] for line in lines if line.strip())
    assert "equal to model(..., output_hidden_states=True, output_attentions=True): True" in result.stdout
