"""The core install (no torch): a command that needs torch prints one line naming the extra and exits 2.

Each case runs in a fresh interpreter where `import torch` fails, as it does where torch is not installed
(tests/integration/test_install.py runs `check` in a real core install).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT

LLAMA = ROOT / "yamltrace" / "specs" / "llama.yaml"
BLOCK_TORCH = "import sys; sys.modules['torch'] = None; from yamltrace.cli import main; sys.exit(main(sys.argv[1:]))"
LINE = (
    "yamltrace {command}: this command needs torch, which is not installed: pip install 'yamltrace[torch]' "
    "(or install torch yourself). The core install only validates specs and prints the schema.\n"
)


def _run(*argv: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", BLOCK_TORCH, *map(str, argv)]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, timeout=120)


@pytest.mark.parametrize(
    "argv",
    [
        ["check", LLAMA],
        ["check", LLAMA, "--model", "yamltrace.examples.tiny:TinyModel"],
        ["extract", "--checkpoint", "ckpt", "--data", "texts.jsonl", "--tokenizer", "tok", "--max-length", "8", "--out", "acts"],
    ],
    ids=["check", "check --model", "extract"],
)
def test_a_command_that_needs_torch_prints_one_line_and_exits_2(argv: list[str | Path], tmp_path: Path) -> None:
    result = _run(*argv, cwd=tmp_path)
    assert (result.returncode, result.stdout, result.stderr) == (2, "", LINE.format(command=argv[0]))


def test_validate_runs_without_torch(tmp_path: Path) -> None:
    result = _run("validate", LLAMA, cwd=tmp_path)
    assert (result.returncode, result.stdout, result.stderr) == (0, "1 file, 0 invalid, 0 problems\n", "")
