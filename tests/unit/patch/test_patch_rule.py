"""One patch rule for every caller: `trace`, `from_pretrained`, `yamltrace check`, `patch_model` select
with the same linear-time, device-aware `PatchRule`, and recorders follow it at the root and in scopes."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import ROOT, ConfigPart, selected

import yamltrace
from yamltrace.engine import CAPTURE_MAP_ATTRIBUTE, OutputRecorder
from yamltrace.errors import SpecError
from yamltrace.examples.tiny import TinyAttention, TinyConfig, TinyDecoderLayer, TinyMLP, TinyModel
from yamltrace.kernels import SdpaTinyAttention
from yamltrace.patch import patch_output_recorders

HOSTILE = r"^(\w+\w?)+!$"  # Python's re backtracks for minutes on a 26-character word; RE2 answers at once

LONG_NAMES = """
from yamltrace.examples.tiny import TinyConfig, TinyDecoderLayer, TinyModel


class TinyDecoderLayerLongNameXX(TinyDecoderLayer):  # a 26-character class name
    pass


class LongTinyModel(TinyModel):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__(config)
        for layer in self.layers:
            layer.__class__ = TinyDecoderLayerLongNameXX
"""

SPEC = f"""\
yamltrace: 1
outputs:
  hidden_states: {{target: "longnames:TinyDecoderLayerLongNameXX"}}
patches:
  '{HOSTILE}': torch.nn:Identity
"""


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    """A folder with the `longnames` module and `spec.yaml`, whose patch key backtracks on `re`."""
    (tmp_path / "longnames.py").write_text(LONG_NAMES, encoding="utf-8")
    (tmp_path / "spec.yaml").write_text(SPEC, encoding="utf-8")
    return tmp_path


def run(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Python in a child process (a backtracking match shows as a timeout there instead of a hang)."""
    env = {"PYTHONPATH": f"{folder}:{ROOT}", "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, *args], cwd=folder, env=env, capture_output=True, text=True, timeout=120)


TRACE = """
import torch, yamltrace, longnames
from yamltrace.examples.tiny import TinyConfig
yamltrace.validate_spec("spec.yaml")  # raises SpecError when it refuses the spec
model = longnames.LongTinyModel(TinyConfig()).eval()
{load}
with torch.no_grad(), yamltrace.trace(model{spec}) as captures:
    model(torch.randint(0, 128, (1, 8)))
print(len(captures["hidden_states"]))
"""


@pytest.mark.slow  # a child process under a timeout
def test_a_backtracking_patch_key_cannot_hang_trace(hostile: Path) -> None:
    done = run(hostile, "-c", TRACE.format(load="", spec=", 'spec.yaml'"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["5"]


@pytest.mark.slow  # a child process under a timeout
def test_a_backtracking_patch_key_in_a_checkpoint_spec_cannot_hang_trace(hostile: Path) -> None:
    load = (
        "yamltrace.save_pretrained(model, 'ckpt', spec=open('spec.yaml').read())\n"
        "model = yamltrace.from_pretrained(longnames.LongTinyModel, 'ckpt').eval()"
    )
    done = run(hostile, "-c", TRACE.format(load=load, spec=""))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["5"]


@pytest.mark.slow  # a child process under a timeout
def test_a_backtracking_patch_key_cannot_hang_check(hostile: Path) -> None:
    done = run(hostile, "-m", "yamltrace", "check", "spec.yaml", "--model", "longnames:LongTinyModel")
    assert done.returncode == 1, done.stderr[-2000:]
    assert f"patch '{HOSTILE}' -> torch.nn:Identity: MATCHES NOTHING" in done.stdout.replace("\\\\", "\\")


PATCH = """\
patches:
  TinyAttention: {replace_with: yamltrace.kernels:SdpaTinyAttention, device: cuda}
"""
ROOT_SPEC = "yamltrace: 1\noutputs:\n  attentions: {target: yamltrace.examples.tiny:TinyAttention, index: 1}\n" + PATCH
SCOPE_SPEC = (
    "yamltrace: 1\nscopes:\n"
    + "".join(
        f"  layers.{i}:\n    outputs:\n      attn{i}: {{target: yamltrace.examples.tiny:TinyAttention, index: 1}}\n"
        for i in range(4)
    )
    + PATCH
)
# Where each spec puts the four layers' attention weights.
KEYS = {ROOT_SPEC: [("attentions", i) for i in range(4)], SCOPE_SPEC: [(f"attn{i}", 0) for i in range(4)]}
both = pytest.mark.parametrize("text", [ROOT_SPEC, SCOPE_SPEC], ids=["root", "scopes"])


def attention_weights(captures: Mapping[str, tuple[Any, ...]], text: str) -> list[Any]:
    return [captures[key][i] for key, i in KEYS[text]]


@both
def test_a_patch_for_another_device_leaves_the_recorders_alone(text: str) -> None:
    model = TinyModel(TinyConfig()).eval()
    ids = torch.randint(0, 128, (1, 8))
    with torch.no_grad():
        expected = model(ids, output_attentions=True).attentions
        with yamltrace.trace(model, yamltrace.load_spec(text)) as captures:
            model(ids)
    assert all(torch.equal(a, e) for a, e in zip(attention_weights(captures, text), expected, strict=True))


@both
def test_a_checkpoint_spec_for_another_device_captures_the_original_modules(tmp_path: Path, text: str) -> None:
    original = TinyModel(TinyConfig()).eval()
    yamltrace.save_pretrained(original, tmp_path, spec=text)
    model = yamltrace.from_pretrained(TinyModel, tmp_path).eval()
    assert not any(isinstance(m, SdpaTinyAttention) for m in model.modules())
    ids = torch.randint(0, 128, (1, 8))
    with torch.no_grad():
        expected = original(ids, output_attentions=True).attentions
        with yamltrace.trace(model) as captures:
            model(ids)
    assert all(torch.equal(a, e) for a, e in zip(attention_weights(captures, text), expected, strict=True))


@both
def test_a_spec_for_this_device_must_be_applied_first_then_is_followed(text: str) -> None:
    # index 0: the attention output (SDPA computes no weights)
    spec = yamltrace.load_spec(text.replace("device: cuda", "device: cpu").replace("index: 1", "index: 0"))
    model = TinyModel(TinyConfig()).eval()
    with pytest.raises(SpecError, match="trace does not apply a spec's patches"):
        with yamltrace.trace(model, spec):
            pass
    with yamltrace.patch_model(model, spec), torch.no_grad(), yamltrace.trace(model, spec) as captures:
        model(torch.randint(0, 128, (1, 8)))
    assert [t.shape for t in attention_weights(captures, text)] == [(1, 8, 32)] * 4


def retargeted(mapping: Any, recorder: OutputRecorder) -> OutputRecorder:
    """The recorder that `patch_output_recorders` leaves in a module's capture map in place of `recorder`."""
    model = torch.nn.Module()
    setattr(model, CAPTURE_MAP_ATTRIBUTE, {"x": recorder})
    handle = patch_output_recorders(model, mapping)
    result: OutputRecorder = getattr(model, CAPTURE_MAP_ATTRIBUTE)["x"]
    handle.remove()
    assert getattr(model, CAPTURE_MAP_ATTRIBUTE)["x"] is recorder
    return result


def test_exact_key_wins_then_patterns_in_order_and_device_entries_drop_out_first() -> None:
    mapping = {".*Attention": TinyMLP, "TinyAttention": SdpaTinyAttention, "Tiny": TinyDecoderLayer}
    assert selected(mapping, "TinyAttention", ConfigPart) is SdpaTinyAttention
    assert selected(mapping, "OtherAttention", ConfigPart) is TinyMLP  # the key ".*Attention"
    assert selected(mapping, "TinyMLP", ConfigPart) is TinyDecoderLayer  # the key "Tiny"
    assert selected(mapping, "Nothing", ConfigPart) is None
    spec = yamltrace.load_spec(ROOT_SPEC.replace("patches:\n", "patches:\n  '.*Attention': torch.nn:Identity\n"))
    assert selected(spec, "TinyAttention", ConfigPart, device="cpu") is torch.nn.Identity
    assert selected(spec, "TinyAttention", ConfigPart, device="cuda:0") is SdpaTinyAttention


def test_retarget_replaces_each_target_and_keeps_the_other_fields() -> None:
    mapping = {"TinyAttention": SdpaTinyAttention}
    recorder = OutputRecorder(target_class=TinyAttention, index=1, layer_name="self_attn")
    assert retargeted(mapping, recorder) == OutputRecorder(target_class=SdpaTinyAttention, index=1, layer_name="self_attn")
    untouched = OutputRecorder(target_class=TinyMLP)
    assert retargeted(mapping, untouched) is untouched
    by_name = OutputRecorder(class_name="TinyAttention")
    assert retargeted(mapping, by_name).target_class is SdpaTinyAttention  # transformers' rule for class names


def test_retarget_maps_each_class_of_a_tuple_target() -> None:
    recorder = OutputRecorder(target_class=(TinyAttention, TinyMLP), index=1)
    result = retargeted({"TinyAttention": SdpaTinyAttention}, recorder)
    assert (result.target_class, result.index) == ((SdpaTinyAttention, TinyMLP), 1)
    assert retargeted({"Other": SdpaTinyAttention}, recorder) is recorder
