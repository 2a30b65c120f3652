"""The command line on specs with interventions: `inspect` lists them in the order they apply (importing
nothing), `check` lists the modules each one edits and fails on one that edits none."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from yamltrace.cli import main

SPEC = """yamltrace: 1
outputs:
  hidden_states: yamltrace.examples.tiny:TinyDecoderLayer
interventions:
  ablate: {target: yamltrace.examples.tiny:TinyAttention, heads: [1], zero: true}
  steer: {class_name: mlp, layers: [0], positions: [-1], add: [1, 2]}
  patch: {class_name: layers.1.mlp, input: 0, set: {value: clean}}
"""


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "edits.yaml"
    path.write_text(SPEC, encoding="utf-8")
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_inspect_lists_the_interventions_in_order(capsys: pytest.CaptureFixture[str], spec: Path) -> None:
    status, out, _ = run(capsys, "inspect", str(spec))
    assert status == 0
    assert out.splitlines() == [
        f"{spec}:",
        "  output hidden_states: yamltrace.examples.tiny:TinyDecoderLayer",
        "  intervention 1 ablate (line 5): {target: 'yamltrace.examples.tiny:TinyAttention', heads: [1], zero: true}",
        "  intervention 2 steer (line 6): {class_name: mlp, layers: [0], positions: [-1], add: [1, 2]}",
        "  intervention 3 patch (line 7): {class_name: layers.1.mlp, input: 0, set: {value: clean}}",
    ]


def test_inspect_reads_a_checkpoint_folder_spec(capsys: pytest.CaptureFixture[str], spec: Path) -> None:
    (spec.parent / "yamltrace.yaml").write_text(SPEC, encoding="utf-8")
    status, out, _ = run(capsys, "inspect", str(spec.parent))
    assert status == 0 and "intervention 1 ablate" in out
    empty = spec.parent / "empty"
    empty.mkdir()
    status, _, err = run(capsys, "inspect", str(empty))
    assert status == 2 and "no yamltrace.yaml in this folder" in err


def test_inspect_reports_an_invalid_intervention_located(capsys: pytest.CaptureFixture[str], spec: Path) -> None:
    spec.write_text(SPEC.replace("zero: true}", "zero: true, scale: 2}"), encoding="utf-8")
    status, out, _ = run(capsys, "inspect", str(spec))
    assert status == 1
    assert out.startswith(f"{spec}:5:11: $.interventions.ablate: more than one operation")


def test_inspect_imports_nothing(spec: Path) -> None:
    code = f"import sys\nfrom yamltrace.cli import main\nprint(main(['inspect', {str(spec)!r}]), 'torch' in sys.modules)\n"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.splitlines()[-1] == "0 False", result.stderr


def test_check_lists_the_modules_each_intervention_edits(capsys: pytest.CaptureFixture[str], spec: Path) -> None:
    status, out, _ = run(capsys, "check", str(spec), "--model", "yamltrace.examples.tiny:TinyModel")
    assert status == 0, out
    lines = [line for line in out.splitlines() if line.startswith("intervention ")]
    attention = ", ".join(f"layers.{i}.self_attn" for i in range(4))
    assert lines == [
        f"intervention ablate (line 5): zero on TinyAttention (heads [1]): 4 module(s): {attention}",
        "intervention steer (line 6): add [1, 2] on 'mlp' (layers [0], positions [-1]): 1 module(s): layers.0.mlp",
        "intervention patch (line 7): set {value: clean} on 'layers.1.mlp' (input 0): 1 module(s): layers.1.mlp",
    ]


def test_check_fails_on_an_intervention_that_edits_nothing(capsys: pytest.CaptureFixture[str], spec: Path) -> None:
    spec.write_text(SPEC + "  typo: {class_name: mpl, scale: 2}\n", encoding="utf-8")
    status, out, _ = run(capsys, "check", str(spec), "--model", "yamltrace.examples.tiny:TinyModel")
    assert status == 1
    assert "intervention typo (line 8): scale 2 on 'mpl': MATCHES NOTHING; closest module paths: .mlp" in out


def test_check_lists_only_the_layers_an_intervention_edits(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`check` lists what the engine edits (its `layers` kept), and `layers` beyond the model is a
    located problem of that intervention, not a usage error."""
    path = tmp_path / "layers.yaml"
    path.write_text(
        "yamltrace: 1\ninterventions:\n"
        "  last: {target: yamltrace.examples.tiny:TinyDecoderLayer, layers: [-1], scale: 0.5}\n"
        "  beyond: {target: yamltrace.examples.tiny:TinyDecoderLayer, layers: [9], zero: true}\n",
        encoding="utf-8",
    )
    status, out, _ = run(capsys, "check", str(path), "--model", "yamltrace.examples.tiny:TinyModel")
    assert status == 1, out
    assert "scale 0.5 on TinyDecoderLayer (layers [-1]): 1 module(s): layers.3" in out
    assert f"{path}:4:11: $.interventions.beyond: intervention 'beyond': layer 9 out of range" in out
    assert "valid indices are -4..3" in out
    assert out.count(f"{path}:4:11:") == 1  # located once


def test_check_reports_every_problem_past_a_class_that_does_not_resolve(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A wrong class name does not hide the spec's other problems: one run of `check` reports them all,
    each located, and lists what the rest of the spec hooks."""
    path = tmp_path / "bad.yaml"
    path.write_text(
        "yamltrace: 1\noutputs:\n"
        "  a: {target: yamltrace.examples.tiny:NoSuchLayer}\n"
        "  b: {class_name: nowhere_at_all}\n"
        "  c: {target: yamltrace.examples.tiny:TinyDecoderLayer, layers: [40]}\n"
        "interventions:\n"
        "  beyond: {target: yamltrace.examples.tiny:TinyDecoderLayer, layers: [9], zero: true}\n"
        "  unknown: {target: yamltrace.examples.tiny:AlsoMissing, zero: true}\n",
        encoding="utf-8",
    )
    status, out, _ = run(capsys, "check", str(path), "--model", "yamltrace.examples.tiny:TinyModel")
    assert status == 1
    assert f"{path}:3:15: $.outputs.a.target: module 'yamltrace.examples.tiny' has no attribute 'NoSuchLayer'" in out
    assert f"{path}:4:6: $.outputs.b: output 'b': the recorder of path suffix 'nowhere_at_all' matches no module" in out
    assert f"{path}:5:65: $.outputs.c.layers: layer 40 out of range" in out
    assert f"{path}:7:11: $.interventions.beyond: intervention 'beyond': layer 9 out of range" in out
    assert "AlsoMissing" in out
    assert "5 problems" in out
