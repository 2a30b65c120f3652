"""`import yamltrace` stays light: it never imports transformers."""

from __future__ import annotations

import subprocess
import sys


def test_import_does_not_import_transformers() -> None:
    code = "import sys, yamltrace; print('transformers' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
