"""`import yamltrace` stays light: it never imports transformers."""

from __future__ import annotations

import subprocess
import sys


def test_import_does_not_import_transformers() -> None:
    code = "import sys, yamltrace; print('transformers' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_every_public_name_resolves() -> None:
    import yamltrace

    for name in yamltrace.__all__:
        assert getattr(yamltrace, name) is not None, name


def test_import_does_not_import_torch() -> None:
    code = "import sys, yamltrace; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
