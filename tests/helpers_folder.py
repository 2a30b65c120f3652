"""Helpers for the folder-rule tests: a call that could block on a FIFO, run where it cannot hang the suite."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import ROOT

# Prints how the call ended: "ok", or the exception's class name and message.
_WRAP = """
import sys
try:
{body}
    print("ok")
except Exception as e:
    print(type(e).__name__ + ": " + str(e).replace("\\n", " "))
"""


def bounded(body: str, *args: str, seconds: float = 120) -> str:
    """Run `body` (Python statements; `sys.argv[1:]` are `args`) in a fresh process of this checkout's
    yamltrace, killed after `seconds`: how it ended ("ok" or "ErrorClass: message"). A read that blocks
    (a FIFO opened for reading holds the GIL in safetensors) fails the test instead of hanging it."""
    code = _WRAP.format(body="\n".join("    " + line for line in body.strip().splitlines()))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    try:
        result = subprocess.run(
            [sys.executable, "-c", code, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=seconds
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"still blocked after {seconds} s (a FIFO opened for reading?)")
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]
