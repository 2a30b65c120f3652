"""`yamltrace check`: a recorder's `layers` that the model does not have is a located problem with the
valid range (capture would select nothing there); indices inside the range, negative ones too, pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from yamltrace.cli import main

TINY = "yamltrace.examples.tiny:TinyModel"  # 4 layers
SPEC = """\
yamltrace: 1
imports: [yamltrace.examples.tiny]
outputs:
  hidden_states: {target: TinyDecoderLayer, layers: LAYERS}
  attentions:
    - {target: TinyAttention, layers: [-9, 0]}
"""


def test_out_of_range_layers_are_located_problems_with_the_valid_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.replace("LAYERS", "[1, 40]"), encoding="utf-8")
    assert main(["check", str(path), "--model", TINY]) == 1
    out = capsys.readouterr().out
    assert (
        f"{path}:4:53: $.outputs.hidden_states.layers: layer 40 out of range: 'hidden_states' has 5 position(s) on "
        "TinyModel (config.num_hidden_layers = 4 and its initial state); valid indices are -5..4"
    ) in out
    assert (
        f"{path}:6:39: $.outputs.attentions[0].layers: layer -9 out of range: 'attentions' has 4 position(s) on "
        "TinyModel (config.num_hidden_layers = 4); valid indices are -4..3"
    ) in out


def test_layers_inside_the_range_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.replace("LAYERS", "[0, 4, -5]").replace("[-9, 0]", "[-4, 3]"), encoding="utf-8")
    assert main(["check", str(path), "--model", TINY]) == 0
    assert "out of range" not in capsys.readouterr().out
