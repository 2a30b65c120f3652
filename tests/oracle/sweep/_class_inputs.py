"""Inputs for classes whose forward takes a layout no generic builder in `_inputs` can infer.

Each hook receives the tiny model and a function returning the generic builders' inputs (which it
calls when it adjusts them), and returns the inputs its forward really needs, built the way the
family's processor or parent model builds them. Keyed by `family.ClassName` (the sweep's target id);
`_inputs.build_inputs` calls it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["CLASS_INPUTS"]

BATCH = 2
Generic = Callable[[], dict[str, Any]]


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _patch_rows(image: torch.Tensor, patch: int) -> torch.Tensor:
    """(batch, channels, height, width) pixels as (batch, patches, channels * patch * patch) rows:
    row-major patches, each patch's pixels row-major then channel."""
    batch, channels, height, width = image.shape
    rows = image.reshape(batch, channels, height // patch, patch, width // patch, patch)
    return rows.permute(0, 2, 4, 3, 5, 1).reshape(batch, (height // patch) * (width // patch), -1)


def _linear_patches(model: Any, generic: Generic) -> dict[str, Any]:
    """Towers that embed flattened patches with a linear layer (Molmo2): the generic image as patch rows."""
    inputs = generic()
    inputs["pixel_values"] = _patch_rows(inputs["pixel_values"], model.config.patch_size)
    return inputs


def _positioned_patches(model: Any, generic: Generic) -> dict[str, Any]:
    """Gemma 4's vision tower: patch rows and each patch's (x, y) grid position."""
    inputs = _linear_patches(model, generic)
    side = inputs["pixel_values"].shape[1] ** 0.5
    rows, columns = torch.meshgrid(torch.arange(int(side)), torch.arange(int(side)), indexing="ij")
    positions = torch.stack([columns.flatten(), rows.flatten()], dim=-1)
    inputs["pixel_position_ids"] = positions.expand(BATCH, -1, -1).contiguous()
    return inputs


def _conv_patches(model: Any, generic: Generic) -> dict[str, Any]:
    """Kimi-K2.5's vision tower: the flattened Qwen2-VL style patches as the (patches, channels, patch,
    patch) blocks its 2-D patch convolution reads."""
    inputs = generic()
    patch = model.config.patch_size
    inputs["pixel_values"] = inputs["pixel_values"].reshape(inputs["pixel_values"].shape[0], -1, patch, patch)
    return inputs


def _batched_patches(model: Any, generic: Generic) -> dict[str, Any]:
    """PaddleOCR-VL's vision tower: the VL model packs every image's (channels, patch, patch) patches
    into one batch entry, (1, patches, channels, patch, patch)."""
    inputs = _conv_patches(model, generic)
    inputs["pixel_values"] = inputs["pixel_values"].unsqueeze(0)
    return inputs


def _token_patches(model: Any, generic: Generic) -> dict[str, Any]:
    """Inkling 2's vision tower: one (patch * merge, patch * merge, channels) block of pixels per
    language-model image token, and each image's grid counted in such tokens (2 x 2 per image)."""
    config = model.config
    merge, patch, channels = config.spatial_merge_size, config.patch_size, config.num_channels
    grid = torch.tensor([[1, 2, 2]] * BATCH)
    tokens = int(grid.prod(-1).sum())
    pixels = torch.rand(tokens, patch * merge, patch * merge, channels, generator=_generator(11)) * 2 - 1
    return {"pixel_values": pixels, "image_grid_thw": grid}


def _mel_as_channels(model: Any, generic: Generic) -> dict[str, Any]:
    """Gemma 4's audio tower: its input projection assumes as many mel bins as the first subsampling
    convolution has channels (128 in the checkpoint); 64 frames."""
    mel = model.config.subsampling_conv_channels[0]
    inputs = generic()
    inputs["input_features"] = torch.randn(BATCH, 64, mel, generator=_generator(4))
    return inputs


def _all_valid(model: Any, generic: Generic) -> dict[str, Any]:
    """Kosmos-2.5's vision encoder: its forward cannot run without a mask (every patch valid here)."""
    inputs = generic()
    hidden = inputs["hidden_states"]
    inputs["attention_mask"] = torch.ones(hidden.shape[:2], dtype=torch.long)
    return inputs


def _dinov3_encoder(model: Any, generic: Generic) -> dict[str, Any]:
    """DINOv3's encoder stack: the class and register tokens followed by one image's patches, with the
    rotary (cos, sin) the parent model computes from the pixels."""
    config = model.config
    module = importlib.import_module(type(model).__module__)
    rope = module.DINOv3ViTRopePositionEmbedding(config)
    size = config.image_size if isinstance(config.image_size, int) else config.image_size[0]
    pixels = torch.randn(BATCH, config.num_channels, size, size, generator=_generator(3))
    patches = (size // config.patch_size) ** 2
    tokens = 1 + config.num_register_tokens + patches
    hidden = torch.randn(BATCH, tokens, config.hidden_size, generator=_generator(7))
    with torch.no_grad():
        position_embeddings = rope(pixels)
    return {"hidden_states": hidden, "position_embeddings": position_embeddings}


def _inkling_pixels(model: Any, generic: Generic) -> dict[str, Any]:
    """Inkling's vision MLP: (patches, temporal patch, patch, patch, channels) pixel blocks."""
    config = model.config
    shape = (BATCH * 4, config.temporal_patch_size, config.patch_size, config.patch_size, config.num_channels)
    return {"pixel_values": torch.randn(*shape, generator=_generator(3))}


def _inkling_audio(model: Any, generic: Generic) -> dict[str, Any]:
    """Inkling's audio embedder: (audios, frames, mel bins) quantised mel values, below `mel_vocab_size`."""
    config = model.config
    codes = torch.randint(0, config.mel_vocab_size, (BATCH, 8, config.n_mel_bins), generator=_generator(5))
    return {"audio_input_ids": codes}


def _pooled_patches(model: Any, generic: Generic) -> dict[str, Any]:
    """Molmo2's adapter: two crops' 4 x 4 patch features (its feature layers concatenated) and, per
    output token, the flat indices of the 2 x 2 patches it pools; the last token has one padding slot
    (-1), as the processor pads."""
    config = model.config
    crops, side = 2, 4
    width = config.hidden_size * len(config.vision_feature_layer)
    features = torch.randn(crops, side * side, width, generator=_generator(18))
    corners = torch.tensor([[0, 1, side, side + 1]])
    starts = torch.tensor([c * side * side + r * side + col for c in range(crops) for r in (0, 2) for col in (0, 2)])
    indices = starts[:, None] + corners
    indices[-1, -1] = -1
    return {"image_features": features, "pooled_patches_idx": indices}


def _draft_block(model: Any, generic: Generic) -> dict[str, Any]:
    """MuseGlimmer's block-diffusion drafter: one block of noise embeddings to denoise, and the target
    model's hidden states of five accepted tokens (its `target_layer_ids` layers concatenated)."""
    config = model.config
    noise = torch.randn(BATCH, config.block_size, config.hidden_size, generator=_generator(19))
    width = config.hidden_size * len(config.target_layer_ids)
    return {"noise_embeds": noise, "context_hidden_states": torch.randn(BATCH, 5, width, generator=_generator(20))}


CLASS_INPUTS: dict[str, Callable[[Any, Generic], dict[str, Any]]] = {
    "kimi_k25.Kimi_K25VisionModel": _conv_patches,
    "molmo2.Molmo2VisionModel": _linear_patches,
    "gemma4.Gemma4VisionModel": _positioned_patches,
    "paddleocr_vl.PaddleOCRVisionModel": _batched_patches,
    "paddleocr_vl.PaddleOCRVisionTransformer": _batched_patches,
    "inkling2.Inkling2VisionModel": _token_patches,
    "gemma4.Gemma4AudioModel": _mel_as_channels,
    "kosmos2_5.Kosmos2_5VisionEncoder": _all_valid,
    "dinov3_vit.DINOv3ViTEncoder": _dinov3_encoder,
    "inkling.InklingVisionModel": _inkling_pixels,
    "inkling.InklingAudioModel": _inkling_audio,
    "molmo2.Molmo2Adapter": _pooled_patches,
    "muse_glimmer_assistant.MuseGlimmerAssistantModel": _draft_block,
}
