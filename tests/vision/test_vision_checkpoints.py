"""Checkpoints that carry their spec: diffusers `ModelMixin` classes through yamltrace's save_pretrained /
from_pretrained, and a timm checkpoint with `yamltrace.yaml` beside its weights."""

from __future__ import annotations

from pathlib import Path

import pytest
import timm
import torch
import vision_models as vm
from diffusers import UNet2DConditionModel
from safetensors.torch import save_file

import yamltrace
import yamltrace.specs
from yamltrace import SpecError


def test_diffusers_checkpoint_with_its_spec(tmp_path: Path) -> None:
    model, inputs = vm.unet(), vm.unet_inputs()
    yamltrace.save_pretrained(model, tmp_path, spec="builtin:diffusers_unet2d")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "diffusion_pytorch_model.safetensors", "yamltrace.yaml"]
    assert (tmp_path / "yamltrace.yaml").read_text() == yamltrace.specs.path("diffusers_unet2d").read_text()

    loaded = yamltrace.from_pretrained(UNet2DConditionModel, tmp_path).eval()
    attention = [type(m).__name__ for p, m in loaded.named_modules() if p.endswith(("attn1", "attn2"))]
    assert attention == ["DiffusersEagerAttention"] * 8  # built by the patch, while diffusers constructed the model
    assert not any(type(m).__name__ == "Attention" for m in loaded.modules())
    assert type(next(m for m in model.modules() if type(m).__name__.endswith("Attention"))).__name__ == "Attention"
    with torch.no_grad():
        expected = model(**inputs).sample
        with yamltrace.trace(loaded) as captures:  # the attached spec
            output = loaded(**inputs).sample
    torch.testing.assert_close(output, expected, rtol=1e-5, atol=1e-5)  # the weights loaded into the replacements
    assert [len(captures[k]) for k in ("down_block_outputs", "mid_block_outputs", "up_block_outputs", "cross_attentions")] == [
        2,
        1,
        2,
        4,
    ]

    yamltrace.save_pretrained(loaded, tmp_path / "again")  # the attached spec is written back
    assert "DiffusersEagerAttention" in (tmp_path / "again" / "yamltrace.yaml").read_text()


def test_a_diffusers_load_whose_spec_fails_changes_nothing(tmp_path: Path) -> None:
    from diffusers.models import attention as diffusers_attention

    vm.unet().save_pretrained(tmp_path)
    (tmp_path / "yamltrace.yaml").write_text(
        "yamltrace: 1\nimports: [yamltrace.kernels]\npatches:\n  ^Attention$: yamltrace.kernels:DiffusersEagerAttention\n"
        "outputs:\n  probs: {target: AttentionProbabilities, layer_name: no_such_layer, index: 0}\n"
        "interventions:\n  off: {target: AttentionProbabilities, layer_name: no_such_layer, zero: true}\n"
    )
    before = diffusers_attention.Attention
    with pytest.raises(SpecError, match="off"):
        yamltrace.from_pretrained(UNet2DConditionModel, tmp_path)
    assert diffusers_attention.Attention is before and before.__name__ == "Attention"


def test_timm_checkpoint_with_the_spec_beside_it(tmp_path: Path) -> None:
    """timm loads its weights (`pretrained_cfg_overlay=dict(file=...)`, a local safetensors file, no hub);
    yamltrace reads the spec beside them, patches the built model and traces it with that spec."""
    model = vm.vit()
    save_file(model.state_dict(), str(tmp_path / "model.safetensors"))
    (tmp_path / "yamltrace.yaml").write_bytes(yamltrace.specs.path("timm_vit").read_bytes())

    loaded = timm.create_model(
        "vit_tiny_patch16_224", pretrained=True, depth=2, img_size=32, patch_size=8,
        pretrained_cfg_overlay={"file": str(tmp_path / "model.safetensors"), "num_classes": 1000},
    ).eval()  # fmt: skip
    spec = yamltrace.load_spec(tmp_path / "yamltrace.yaml", for_model=loaded)
    yamltrace.patch_model(loaded, spec)
    with torch.no_grad(), yamltrace.trace(loaded, spec) as captures:
        output = loaded(*vm.vit_inputs())
        expected = model(*vm.vit_inputs())
    torch.testing.assert_close(output, expected, rtol=1e-5, atol=1e-5)
    assert len(captures["hidden_states"]) == 3 and len(captures["attentions"]) == 2
