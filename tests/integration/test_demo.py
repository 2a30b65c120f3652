"""The README's first command: the demo runs, prints its tables and exits 0."""

from __future__ import annotations

import subprocess
import sys


def _rows(stdout: str) -> list[list[str]]:
    return [line.split() for line in stdout.splitlines() if line.strip()]


def test_demo_traces_loads_a_checkpoint_swaps_a_kernel_and_exits_zero() -> None:
    result = subprocess.run([sys.executable, "-m", "yamltrace.examples.demo"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = _rows(result.stdout)
    # 1. the model's own map; 2. the checkpoint's spec adds mlp_outputs for two layers; 3. the swapped kernel.
    assert rows.count(["hidden_states", "5", "5", "2x8x32"]) == 3
    assert rows.count(["attentions", "4", "4", "2x4x8x8"]) == 2
    assert rows.count(["mlp_outputs", "4", "2", "2x8x32"]) == 2
    assert ["attentions", "0", "0", "-"] in rows
    assert "equal to model(..., output_hidden_states=True, output_attentions=True): True" in result.stdout
    assert "attention class: SdpaTinyAttention" in result.stdout
    assert "outputs agree within 1e-5: True" in result.stdout
    # The warning about attention weights SDPA does not compute is printed in its place, after its table.
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    said = lines.index("   (scaled_dot_product_attention returns no weights, so attentions is empty; trace says so:)")
    assert lines[said + 1].startswith("   UserWarning: trace: 'attentions' recorded no tensor although the modules ran")
