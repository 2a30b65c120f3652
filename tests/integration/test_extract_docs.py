"""docs/extract.md's worked example runs as written, and its command stores the same rows."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest
import torch
from helpers import ROOT

from yamltrace.cli import main
from yamltrace.extraction import open_activations

PAGE = (ROOT / "docs" / "extract.md").read_text(encoding="utf-8")


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", PAGE, flags=re.DOTALL)


def test_the_worked_example_and_its_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    shutil.copytree(ROOT / "specs", tmp_path / "specs")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    try:
        (example,) = _blocks("python")
        exec(compile(example, "docs/extract.md", "exec"), namespace)
        acts = namespace["acts"]
        assert len(acts) == 20 and acts.layers("hidden_states") == [0, 4]
        assert namespace["last"].shape == (20, 8, 32) and namespace["last"].dtype == torch.float16
        assert torch.equal(namespace["some"], namespace["acts"].get("hidden_states", 0)[5:12])
        assert namespace["both"].shape == (2, 4, 8, 32) and namespace["mask"].shape == (20, 8)

        command = next(block for block in _blocks("sh") if block.startswith("yamltrace extract"))
        argv = shlex.split(command.replace("\\\n", " "))
        assert main([*argv[1:], "--quiet"]) == 0
    finally:
        torch.set_num_threads(threads)
    cli = open_activations(tmp_path / "acts-cli")
    assert torch.equal(cli.get("input_ids"), acts.get("input_ids"))
    # The command's model is built from the same config and seed: its last hidden state agrees.
    assert torch.equal(cli.get("hidden_states", 4).half(), acts.get("hidden_states", 4))
