"""The README's examples run: its Python block executes and its YAML block is a loadable spec."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from helpers import ROOT

import yamltrace

README = (ROOT / "README.md").read_text(encoding="utf-8")


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.DOTALL)


def test_readme_has_the_examples_this_file_runs() -> None:
    assert len(_blocks("python")) == 1 and len(_blocks("yaml")) == 1


def test_readme_python_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(ROOT / "specs", tmp_path / "specs")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(_blocks("python")[0], "README.md", "exec"), namespace)
    assert len(namespace["captures"]["hidden_states"]) == 5
    assert [t is None for t in namespace["out"].hidden_states] == [False, True, True, True, False]
    assert type(namespace["loaded"].layers[0].self_attn).__name__ == "SdpaTinyAttention"
    assert (tmp_path / "ckpt" / "yamltrace.yaml").is_file()


def test_readme_yaml_example_is_a_valid_spec() -> None:
    spec = yamltrace.load_spec(_blocks("yaml")[0])
    assert set(spec.outputs) == {"hidden_states", "attentions", "mlp_outputs"}
    assert spec.outputs["mlp_outputs"][0].layers == (0, -1)
    assert [entry.pattern for entry in spec.patches] == ["TinyAttention"]
