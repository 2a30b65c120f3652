"""Tiny random models of the vision suite and their inputs (seeded, built in-process)."""

from __future__ import annotations

from typing import Any

import timm
import torch
from diffusers import UNet2DConditionModel
from torchvision.models import resnet18, resnet50

UNET_CONFIG: dict[str, Any] = {
    "sample_size": 8,
    "in_channels": 4,
    "out_channels": 4,
    "layers_per_block": 1,
    "block_out_channels": (8, 16),
    "down_block_types": ("CrossAttnDownBlock2D", "DownBlock2D"),
    "up_block_types": ("UpBlock2D", "CrossAttnUpBlock2D"),
    "cross_attention_dim": 12,
    "attention_head_dim": 4,
    "norm_num_groups": 4,
}
TEXT_TOKENS = 5


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def vit() -> Any:
    torch.manual_seed(0)
    return timm.create_model("vit_tiny_patch16_224", pretrained=False, depth=2, img_size=32, patch_size=8).eval()


def vit_inputs() -> tuple[torch.Tensor]:
    return (torch.randn(2, 3, 32, 32, generator=generator(1)),)


def resnet(deep: bool = False) -> Any:
    torch.manual_seed(0)
    return (resnet50 if deep else resnet18)(num_classes=10).eval()


def resnet_inputs() -> tuple[torch.Tensor]:
    return (torch.randn(2, 3, 64, 64, generator=generator(2)),)


def unet() -> Any:
    torch.manual_seed(0)
    return UNet2DConditionModel(**UNET_CONFIG).eval()


def unet_inputs() -> dict[str, Any]:
    return {
        "sample": torch.randn(2, 4, 8, 8, generator=generator(3)),
        "timestep": 7,
        "encoder_hidden_states": torch.randn(2, TEXT_TOKENS, 12, generator=generator(4)),
    }
