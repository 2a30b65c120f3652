"""`yamltrace check` as a user runs it: a subprocess on a good spec (exit 0) and a dead one (exit 1)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from helpers import ROOT

GOOD = """\
yamltrace: 1
imports: [yamltrace.examples.tiny]
outputs:
  hidden_states: TinyDecoderLayer
  attentions: {target: TinyAttention, index: 1}
  cross_attentions: {target: TinyAttention, layer_name: cross, optional: true}
"""

DEAD = """\
yamltrace: 1
imports: [yamltrace.examples.tiny]
outputs:
  hidden_states: TinyDecoderLayer
  attentions: {class_name: .self_atn, index: 1}
patches:
  TinyAtention: torch.nn:Identity
"""


def check(tmp_path: Path, text: str, *extra: str) -> subprocess.CompletedProcess[str]:
    spec = tmp_path / "spec.yaml"
    spec.write_text(text, encoding="utf-8")
    (tmp_path / "config.json").write_text('{"num_hidden_layers": 3}', encoding="utf-8")
    command = [sys.executable, "-m", "yamltrace", "check", str(spec), "--model", "yamltrace.examples.tiny:TinyModel", *extra]
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_check_lists_the_modules_each_recorder_hooks(tmp_path: Path) -> None:
    result = check(tmp_path, GOOD, "--config", str(tmp_path / "config.json"))
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].endswith("on TinyModel (built on the meta device):")
    assert (
        lines[1]
        == "outputs: hidden_states[0] TinyDecoderLayer (line 4): 3 module(s): layers.0, layers.1, layers.2; the output: (2, 3, 32), fits hidden_states"
    )
    assert lines[2].startswith("outputs: attentions[0] TinyAttention (line 5): 3 module(s): layers.0.self_attn,")
    assert lines[2].endswith("; element 1 of 2: (2, 4, 3, 3), fits attentions")
    assert lines[3] == "outputs: cross_attentions[0] TinyAttention (line 6): no module (optional)"
    assert lines[4] == "1 file, 0 invalid, 0 problems, 0 warnings"


def test_check_fails_on_what_matches_nothing_with_hints(tmp_path: Path) -> None:
    result = check(tmp_path, DEAD)
    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout
    assert "attentions[0] '.self_atn' (line 5): MATCHES NOTHING; closest module paths: .self_attn" in out
    assert "patch 'TinyAtention' -> torch.nn:Identity: MATCHES NOTHING; the model's classes:" in out
    lines = out.splitlines()
    assert "TinyAttention" in lines[3]
    assert lines[4].endswith(
        "spec.yaml:5:15: $.outputs.attentions: output 'attentions': the recorder of path suffix '.self_atn' "
        "matches no module of TinyModel; closest module paths: .self_attn, .3.self_attn, .2.self_attn. Fix the recorder, mark it "
        "`optional: true` if the module exists only in some configurations, or trace with strict=False."
    )
    assert lines[5].endswith(
        "spec.yaml:7:3: $.patches.TinyAtention: the patch matches no module of TinyModel; fix the class name "
        "or pattern (the model's classes: Embedding, Linear, ModuleList, RMSNorm, TinyAttention, "
        "TinyDecoderLayer, TinyMLP, TinyModel)"
    )
    assert lines[-1] == "1 file, 1 invalid, 2 problems, 0 warnings"


def test_check_needs_a_model(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(GOOD, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "yamltrace", "check", str(spec)], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.startswith(f"{spec}: $: no model to check this spec on: give --model pkg.mod:Class or --checkpoint DIR")
