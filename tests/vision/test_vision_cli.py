"""`yamltrace check` builds timm, torchvision and diffusers models: `--model` factories, a diffusers class
from its `config.json` (`from_config`), and a spec whose `model:` names a factory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import vision_models as vm

import yamltrace.specs
from yamltrace.cli import EXIT_INVALID, EXIT_OK, main


def check(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    status = main(["check", *args])
    captured = capsys.readouterr()
    return status, captured.out + captured.err


def test_timm_factory(capsys: pytest.CaptureFixture[str]) -> None:
    status, out = check(
        capsys, str(yamltrace.specs.path("timm_vit")), "--model", "timm.models.vision_transformer:vit_tiny_patch16_224"
    )
    assert status == EXIT_OK, out
    assert "on VisionTransformer (built on the meta device)" in out
    assert "attentions[0] Dropout (line 21): 12 module(s): blocks.0.attn.attn_drop," in out
    assert "patch '^Attention$' -> yamltrace.kernels:TimmEagerAttention: replaces blocks.0.attn," in out


def test_torchvision_factory(capsys: pytest.CaptureFixture[str]) -> None:
    status, out = check(capsys, str(yamltrace.specs.path("torchvision_resnet")), "--model", "torchvision.models:resnet18")
    assert status == EXIT_OK, out
    assert "block_outputs[0] BasicBlock (line 18): 8 module(s): layer1.0, layer1.1, layer2.0" in out
    assert "block_outputs[1] Bottleneck (line 19): no module (optional)" in out


def test_diffusers_class_from_its_config_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    vm.unet().save_config(tmp_path)  # config.json as diffusers writes it (_class_name, _diffusers_version, ...)
    assert json.loads((tmp_path / "config.json").read_text())["_class_name"] == "UNet2DConditionModel"
    spec = str(yamltrace.specs.path("diffusers_unet2d"))
    status, out = check(capsys, spec, "--model", "diffusers:UNet2DConditionModel", "--config", str(tmp_path / "config.json"))
    assert status == EXIT_OK, out
    # The probabilities exist only on the patched model: check applies the spec's patches first.
    assert (
        "cross_attentions[0] AttentionProbabilities (line 34): 4 module(s): down_blocks.0.attentions.0.transformer_blocks.0.attn2.attn_probs"
        in out
    )
    assert "mid_block_outputs[0] UNetMidBlock2DCrossAttn (line 26): 1 module(s): mid_block" in out


def test_diffusers_config_that_from_config_refuses_is_located(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"down_block_types": ["NoSuchBlock2D"], "up_block_types": ["UpBlock2D"]}))
    status, out = check(
        capsys,
        str(yamltrace.specs.path("diffusers_unet2d")),
        "--model",
        "diffusers:UNet2DConditionModel",
        "--config",
        str(tmp_path / "config.json"),
    )
    assert status != EXIT_OK
    assert "--model UNet2DConditionModel failed to build from --config" in out and "UNet2DConditionModel.from_config" in out


def test_a_spec_s_model_key_may_name_a_factory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "vit.yaml"
    spec.write_text("yamltrace: 1\nmodel: timm.models.vision_transformer:vit_tiny_patch16_224\nextends: builtin:timm_vit\n")
    status, out = check(capsys, str(spec))
    assert status == EXIT_OK, out
    assert "on VisionTransformer" in out and "12 module(s): blocks.0" in out
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("yamltrace: 1\nmodel: torchvision.models:resnet18\nextends: builtin:timm_vit\n")
    status, out = check(capsys, str(wrong))
    assert status == EXIT_INVALID
    assert "matches no module of ResNet" in out
