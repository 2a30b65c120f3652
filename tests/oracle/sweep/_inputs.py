"""Inputs for a tiny model, chosen from its class's `main_input_name`, forward signature and config.

Token ids avoid every special token id the config names (a stray image placeholder would make a
multimodal model look for image features). Encoder-decoders also get `decoder_input_ids`.
Beyond ids, pixels, audio and spectrograms: encoder stacks (`hidden_states`), clips
(`pixel_values_videos`, 5-D pixels), Qwen2-VL style flattened patches with their `grid_thw`,
SigLIP 2 patches with `spatial_shapes`, NaViT-packed patch strips with `target_sizes`, tiled images
with aspect ratios, Q-Former queries, time series (`past_values` and time features), layout boxes
(`bbox`), pre-training patch masks and codec latents (`latents`). Layouts no builder infers come from
per-class hooks (`_class_inputs`). Everything is drawn from fixed-seed generators, so two calls give
equal tensors.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from ._parts import part_inputs

__all__ = ["build_inputs", "forward_parameters"]

BATCH = 2
SEQ = 7


def forward_parameters(model: Any) -> set[str]:
    """The parameter names of the model's forward code (under its decorators)."""
    return set(_signature(model).parameters)


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _special_ids(config: Any) -> set[int]:
    found = set()
    for name in dir(config):
        if name.endswith(("_token_id", "_token_index")):
            value = getattr(config, name, None)
            if isinstance(value, int) and not isinstance(value, bool):
                found.add(value)
    return found


def _vocab(config: Any) -> int:
    for candidate in (config, getattr(config, "text_config", None), getattr(config, "decoder", None)):
        size = getattr(candidate, "vocab_size", None)
        if isinstance(size, int) and size > 0:
            return min(size, 99)
    return 99


def token_ids(config: Any, length: int = SEQ, seed: int = 1) -> torch.Tensor:
    """(BATCH, length) ids below 99 and the vocabulary size, none of them a special token id."""
    vocab = _vocab(config)
    allowed = torch.tensor([i for i in range(vocab) if i not in _special_ids(config)] or [0])
    picks = torch.randint(0, len(allowed), (BATCH, length), generator=_generator(seed))
    return allowed[picks]


def _vision(config: Any) -> Any:
    return getattr(config, "vision_config", None) or config


def pixel_values(config: Any, seed: int = 3) -> torch.Tensor:
    vision = _vision(config)
    size = getattr(vision, "image_size", 32)
    height, width = (size, size) if isinstance(size, int) else tuple(size)[-2:]
    channels = getattr(vision, "num_channels", 3)
    return torch.randn(BATCH, channels, height, width, generator=_generator(seed))


def input_features(config: Any, seed: int = 4) -> torch.Tensor:
    mel = getattr(config, "num_mel_bins", None)
    if mel is not None and getattr(config, "max_source_positions", None):
        return torch.randn(BATCH, mel, 2 * config.max_source_positions, generator=_generator(seed))
    features = (
        getattr(config, "feature_projection_input_dim", None)  # stacked frames (Wav2Vec2-BERT, SeamlessM4T)
        or getattr(config, "input_feat_per_channel", None)
        or getattr(config, "feature_size", None)
        or 80
    )
    channels = getattr(config, "input_channels", 1)
    return torch.randn(BATCH, 64, features * channels, generator=_generator(seed))


def input_values(config: Any, seed: int = 5, length: int = 1600) -> torch.Tensor:
    return torch.randn(BATCH, length, generator=_generator(seed))


def _width(config: Any) -> int:
    for name in ("hidden_size", "d_model", "embed_dim", "n_embd"):
        value = getattr(config, name, None)
        if isinstance(value, int):
            return value
    return 32


def hidden_states(config: Any, seed: int = 7) -> torch.Tensor:
    """What an encoder stack takes: (batch, channels, 8, 8) for a conv stack (`hidden_sizes`), else
    (batch, seq, width), the width being the encoder's `input_dim` (or the neck's `post_conv_out_channels`)
    where it names one (and the batch `num_windows` times larger for a windowed encoder, whose global
    layers regroup the windows)."""
    sizes = getattr(config, "hidden_sizes", None)
    if isinstance(sizes, (list, tuple)) and sizes:
        return torch.randn(BATCH, sizes[0], 8, 8, generator=_generator(seed))
    width = getattr(config, "input_dim", None) or getattr(config, "post_conv_out_channels", None)  # (SLANet's head)
    width = width if isinstance(width, int) else _width(config)
    windows = getattr(config, "num_windows", None)  # windowed ViT (LW-DETR): one row per image and window
    batch = BATCH * windows if isinstance(windows, int) and not isinstance(windows, bool) else BATCH
    return torch.randn(batch, SEQ, width, generator=_generator(seed))


def conv_input(model: Any, seed: int = 7) -> torch.Tensor | None:
    """(batch, channels, side, side) for a stack whose first layer is a 2-D convolution (an image
    backbone or a conv neck taking feature maps): 32 pixels for 1-4 channels, else an 8 x 8 map."""
    first = next((m for m in model.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))), None)
    if not isinstance(first, torch.nn.Conv2d):
        return None
    side = 32 if first.in_channels <= 4 else 8
    return torch.randn(BATCH, first.in_channels, side, side, generator=_generator(seed))


def inputs_embeds(config: Any, seed: int = 8) -> torch.Tensor:
    """(batch, seq, width); a time-series encoder embeds its lagged features itself (`feature_size` wide)."""
    if getattr(config, "lags_sequence", None):  # at most the horizon: a decoder's positions follow the context
        return torch.randn(BATCH, min(SEQ, config.prediction_length), config.feature_size, generator=_generator(seed))
    return torch.randn(BATCH, SEQ, _width(config), generator=_generator(seed))


def patch_grid(config: Any, seed: int = 16) -> torch.Tensor:
    """(batch, width, side, side) patch embeddings of one image, `image_size // patch_size` a side (what
    a vision encoder fed by another tower's patch embedding takes, Unlimited-OCR)."""
    side = max(1, getattr(config, "image_size", 32) // getattr(config, "patch_size", 8))
    return torch.randn(BATCH, _width(config), side, side, generator=_generator(seed))


def video(config: Any, seed: int = 9) -> torch.Tensor:
    """(batch, frames, channels, height, width)."""
    vision = _vision(config)
    frames = getattr(vision, "num_frames", None) or getattr(vision, "frames_per_clip", None) or 4
    return pixel_values(config, seed).unsqueeze(1).expand(-1, frames, -1, -1, -1).contiguous() + torch.randn(
        BATCH, frames, 1, 1, 1, generator=_generator(seed + 1)
    )


def time_series(config: Any, parameters: set[str], seed: int = 10) -> dict[str, torch.Tensor]:
    """Past (and future) values with their time features for the time-series transformers."""
    lags = getattr(config, "lags_sequence", None) or [0]
    past = (getattr(config, "context_length", None) or 32) + max(lags)
    future = getattr(config, "horizon_length", None) or getattr(config, "prediction_length", None) or 4
    features = getattr(config, "num_time_features", 0) or 0
    g = _generator(seed)
    inputs = {"past_values": torch.randn(BATCH, past, generator=g)}
    extra = {
        "past_time_features": torch.randn(BATCH, past, features, generator=g),
        "past_observed_mask": torch.ones(BATCH, past),
        "future_values": torch.randn(BATCH, future, generator=g),
        "future_time_features": torch.randn(BATCH, future, features, generator=g),
        "past_values_padding": torch.zeros(BATCH, past),
        "freq": torch.zeros(BATCH, 1, dtype=torch.long),
    }
    inputs.update({k: v for k, v in extra.items() if k in parameters and (features or "time_features" not in k)})
    return inputs


def grid_patches(config: Any, parameters: list[str], seed: int = 11) -> dict[str, torch.Tensor]:
    """Flattened patches and their (frames, height, width) grid for a Qwen2-VL style vision tower:
    one image per batch entry, 2 x 2 merged patches each."""
    merge = getattr(config, "spatial_merge_size", None) or getattr(config, "merge_size", None) or 1
    temporal = getattr(config, "temporal_patch_size", None) or getattr(config, "patch_temporal", None) or 1
    channels = getattr(config, "in_channels", None) or getattr(config, "num_channels", None) or 3
    patch = getattr(config, "patch_size", 8)
    grid = torch.tensor([[1, 2 * merge, 2 * merge]] * BATCH)
    count = int(grid.prod(-1).sum())
    first, grid_name = parameters[0], next(n for n in parameters if n.endswith("grid_thw"))
    inputs = {
        first: torch.randn(count, channels * temporal * patch * patch, generator=_generator(seed)),
        grid_name: grid,
    }
    if "merge_sizes" in parameters:
        inputs["merge_sizes"] = torch.tensor([merge] * BATCH)
    return inputs


def flat_patches(config: Any, seed: int = 13) -> dict[str, torch.Tensor]:
    """NaFlex-style (SigLIP 2) pixels: (batch, patches, channels * patch * patch), their (rows, columns)
    and a mask with every patch valid."""
    vision = _vision(config)
    patch, channels = getattr(vision, "patch_size", 8), getattr(vision, "num_channels", 3)
    side = max(1, int((getattr(vision, "num_patches", 16) or 16) ** 0.5))
    return {
        "pixel_values": torch.randn(BATCH, side * side, channels * patch * patch, generator=_generator(seed)),
        "spatial_shapes": torch.tensor([[side, side]] * BATCH),
        "pixel_attention_mask": torch.ones(BATCH, side * side, dtype=torch.long),
    }


def packed_patches(config: Any, seed: int = 14) -> dict[str, torch.Tensor]:
    """NaViT-packed (MiniCPM-V) pixels: every image's patches side by side in one
    (1, channels, patch, patch * patches) strip, with each image's (rows, columns) in patches.
    One full-size image per batch entry (a square grid of `image_size // patch_size` patches a side)."""
    vision = _vision(config)
    patch, channels = getattr(vision, "patch_size", 8), getattr(vision, "num_channels", 3)
    side = max(1, getattr(vision, "image_size", 32) // patch)
    strip = torch.randn(1, channels, patch, patch * side * side * BATCH, generator=_generator(seed))
    return {"pixel_values": strip, "target_sizes": torch.tensor([[side, side]] * BATCH)}


def tiles(config: Any, seed: int = 15) -> dict[str, torch.Tensor]:
    """Tiled images (Mllama): (batch, 1 image, max tiles, channels, height, width) pixels, each image's
    aspect-ratio id (1-based index into `supported_aspect_ratios`) and its valid tiles: the first image
    fills every tile, the others one tile (the rest is padding, as the processor pads)."""
    vision = _vision(config)
    count, ratios = vision.max_num_tiles, [list(r) for r in vision.supported_aspect_ratios]
    full = next((i for i, (h, w) in enumerate(ratios) if h * w == count), 0)
    ids = torch.tensor([[full + 1]] + [[ratios.index([1, 1]) + 1]] * (BATCH - 1))
    mask = torch.zeros(BATCH, 1, count, dtype=torch.long)
    mask[0] = 1
    mask[1:, :, 0] = 1
    image = pixel_values(config, seed)
    pixels = image[:, None, None].expand(-1, 1, count, -1, -1, -1) + torch.randn(
        BATCH, 1, count, 1, 1, 1, generator=_generator(seed + 1)
    )
    return {"pixel_values": pixels.contiguous(), "aspect_ratio_ids": ids, "aspect_ratio_mask": mask}


def spectrogram(model: Any, mel: int, frames: int = 64, seed: int = 4) -> torch.Tensor:
    """(batch, mel, frames) when a 1-D convolution reads the mel bins as channels (Whisper style),
    else (batch, frames, mel)."""
    channels_first = any(isinstance(m, torch.nn.Conv1d) and m.in_channels == mel for m in model.modules())
    shape = (BATCH, mel, frames) if channels_first else (BATCH, frames, mel)
    return torch.randn(*shape, generator=_generator(seed))


def bbox(config: Any, seed: int = 12) -> torch.Tensor:
    """(batch, seq, 4) boxes with x0 <= x1 and y0 <= y1: integer coordinates below the 2-D position
    table, or (batch, seq, `dim_bbox`) normalised floats where the config names `dim_bbox` (BROS)."""
    g = _generator(seed)
    width = getattr(config, "dim_bbox", None)
    if width:
        return torch.rand(BATCH, SEQ, width, generator=g)
    top = min(getattr(config, "max_2d_position_embeddings", 1024) or 1024, 1000) - 1
    corners = torch.randint(0, top + 1, (BATCH, SEQ, 2, 2), generator=g).sort(dim=2).values
    return corners.reshape(BATCH, SEQ, 4)  # (x0, y0, x1, y1)


def latents(config: Any, seed: int = 17) -> torch.Tensor:
    """(batch, width, 4): continuous codec latents, channels first, for an audio decoder to upsample."""
    return torch.randn(BATCH, _width(config), 4, generator=_generator(seed))


BUILDERS = {
    "input_ids": token_ids,
    "pixel_values": pixel_values,
    "input_features": input_features,
    "input_values": input_values,
    "pixel_values_videos": video,
    "hidden_states": hidden_states,
    "inputs_embeds": inputs_embeds,
    "image": pixel_values,  # BridgeTower's vision tower
    "patch_embeds": patch_grid,
    "query_embeds": inputs_embeds,  # a Q-Former's learned queries
    "latents": latents,
}


def build_inputs(model: Any) -> dict[str, Any]:
    """Keyword inputs for one forward of `model`: the generic ones (`generic_inputs`), or what the
    class's hook in `_class_inputs.CLASS_INPUTS` makes of them."""
    from ._class_inputs import CLASS_INPUTS

    module = type(model).__module__.split(".")  # transformers.models.<family>.modeling_<name>
    hook = CLASS_INPUTS.get(f"{module[2] if len(module) > 2 else ''}.{type(model).__name__}")
    return hook(model, lambda: generic_inputs(model)) if hook else generic_inputs(model)


def generic_inputs(model: Any) -> dict[str, Any]:
    """Keyword inputs for one forward of `model`: its main input (shaped for the modality, see
    `_main_input`), decoder ids for encoder-decoders, pixels for dual encoders, the extra inputs its
    forward requires (boxes, patch masks, image masks), `use_cache=False` where the forward takes it.
    Qwen2-VL style vision towers and time-series models get their whole input set from one builder."""
    config = model.config
    parameters = forward_parameters(model)
    ordered = list(_signature(model).parameters)[1:]
    part = part_inputs(model, parameters)  # encoders and decoders fed by their parent model (DETR parts, ...)
    if part is not None:
        return part
    if any(name.endswith("grid_thw") for name in ordered[:3]) and ordered[0] in ("hidden_states", "pixel_values"):
        return grid_patches(config, ordered)
    if "past_values" in parameters:
        return time_series(config, parameters)
    main = getattr(type(model), "main_input_name", "input_ids")
    if main not in BUILDERS or main not in parameters:
        main = next((name for name in BUILDERS if name in parameters), main)
    if main not in BUILDERS:
        raise NotImplementedError(f"no input builder for main input {main!r}")
    name = type(model).__name__
    inputs = {main: _main_input(model, main)}
    if "feature_lens" in parameters and main == "input_features" and getattr(config, "num_mel_bins", None):
        frames = 64  # Qwen-Omni audio towers: the batch packed along time, (mel, batch * frames), with lengths
        inputs[main] = torch.randn(config.num_mel_bins, BATCH * frames, generator=_generator(4))
        inputs["feature_lens"] = torch.tensor([frames] * BATCH)
        if "aftercnn_lens" in parameters:
            inputs["aftercnn_lens"] = torch.tensor([(frames - 1) // 2 + 1] * BATCH)
    required = {n for n, p in _signature(model).parameters.items() if p.default is inspect.Parameter.empty}
    if "bool_masked_pos" in required:
        inputs["bool_masked_pos"] = masked_patches(config)
    if "bbox" in parameters:
        inputs["bbox"] = bbox(config)
    if "input_ids" in required and main != "input_ids":  # a dual encoder whose main input is the other tower's
        inputs["input_ids"] = token_ids(config)
    if main == "query_embeds" and "encoder_hidden_states" in parameters:  # the image features queries attend to
        width = getattr(config, "encoder_hidden_size", None) or _width(config)
        inputs["encoder_hidden_states"] = torch.randn(BATCH, 2 * SEQ, width, generator=_generator(17))
    if "num_patches" in required and main == "inputs_embeds":
        inputs["num_patches"] = SEQ // 2 + 1  # leading image tokens, then queries (DeepSeek-OCR 2 encoder)
    if name in NEEDS_ATTENTION_MASK:
        inputs["attention_mask"] = torch.ones_like(inputs[main])
    encoder_decoder = getattr(config, "is_encoder_decoder", False)
    if main == "input_ids":
        if name.endswith("ForMultipleChoice"):
            inputs[main] = torch.stack([inputs[main], token_ids(config, seed=6)], dim=1)  # (batch, choices, seq)
        if name.endswith("ForSequenceClassification") and encoder_decoder and config.eos_token_id is not None:
            inputs[main][:, -1] = config.eos_token_id  # the head pools at the (one) end-of-sequence token
        if "pixel_values" in parameters and not _placeholder_tokens(config):
            inputs["pixel_values"] = video(config) if _is_video(model) else pixel_values(config)  # a dual encoder
    # Pixel layouts, also for the pixels a dual encoder gets above.
    if "spatial_shapes" in parameters and "pixel_values" in inputs:
        inputs.update(flat_patches(config))
    if "target_sizes" in parameters and "pixel_values" in inputs:
        inputs.update(packed_patches(config))
    if "aspect_ratio_ids" in required and "pixel_values" in inputs:
        inputs.update(tiles(config))
    if "image_attention_mask" in parameters and "pixel_values" in inputs:  # IDEFICS: images per sample
        inputs["pixel_values"] = inputs["pixel_values"].unsqueeze(1)
        inputs["image_attention_mask"] = torch.ones(BATCH, inputs[main].shape[-1], 1, dtype=torch.long)
    if "use_cache" in parameters:
        inputs["use_cache"] = False  # a cache is not compared; hybrid (linear attention) caches refuse some calls
    if "decoder_input_ids" in parameters and encoder_decoder and not name.endswith("ForSequenceClassification"):
        inputs["decoder_input_ids"] = token_ids(config, length=5, seed=2)
    codebooks = getattr(getattr(config, "decoder", None), "num_codebooks", _codebooks(model))
    if "decoder_input_ids" in parameters and isinstance(codebooks, int) and "musicgen" in type(model).__module__:
        inputs["decoder_input_ids"] = torch.cat([token_ids(config, 5, seed=2 + i) for i in range(codebooks)])
    return inputs


def _main_input(model: Any, main: str) -> torch.Tensor:
    """The main input, shaped for what the model reads: codec channels, spectrograms (AST, conformer
    or Whisper-style layouts), longer audio for x-vector heads, clips for video models, image pairs
    for keypoint matchers, one row per codebook for MusicGen."""
    config, name = model.config, type(model).__name__
    tensor = BUILDERS[main](config)
    if main == "hidden_states" and conv_input(model) is not None:
        tensor = conv_input(model)
    mel = next(
        (
            getattr(c, "num_mel_bins", None)
            for c in (config, getattr(config, "encoder_config", None), getattr(config, "audio_config", None))
            if getattr(c, "num_mel_bins", None)
        ),
        None,
    )
    if main == "input_values" and isinstance(getattr(config, "audio_channels", None), int):
        tensor = tensor.unsqueeze(1).expand(-1, config.audio_channels, -1).contiguous()  # a codec
    if main == "input_values" and mel and isinstance(getattr(config, "max_length", None), int):
        tensor = torch.randn(BATCH, config.max_length, mel, generator=_generator(5))  # a spectrogram (AST)
    if (
        main == "input_features"
        and mel
        and not getattr(config, "max_source_positions", None)
        and not getattr(getattr(config, "encoder_config", None), "max_source_positions", None)
    ):
        tensor = spectrogram(model, mel)
    if main == "input_values" and name.endswith("ForXVector"):
        tensor = input_values(config, length=16000)  # enough frames for the x-vector TDNN kernels
    step = getattr(config, "samples_per_token", None)
    if main == "input_values" and isinstance(step, int) and step > 0 and tensor.shape[1] % step:
        tensor = input_values(config, length=-(-tensor.shape[1] // step) * step)  # whole tokens (MuseSpark audio)
    if main == "pixel_values" and getattr(config, "model_type", None) in IMAGE_PAIRS:
        tensor = torch.stack([tensor, pixel_values(config, seed=14)], dim=1)  # (batch, 2, channels, height, width)
    if main == "pixel_values" and _is_video(model):
        tensor = video(config)
        if name.startswith("XCLIPVision"):
            tensor = tensor.flatten(0, 1)  # the vision tower takes frames as the batch
    codebooks = _codebooks(model)
    if main == "input_ids" and isinstance(codebooks, int) and "musicgen" in type(model).__module__:
        tensor = torch.cat([token_ids(config, seed=1 + i) for i in range(codebooks)])  # (batch * codebooks, seq)
    return tensor


# Classes whose forward reads an attention mask its signature leaves optional.
NEEDS_ATTENTION_MASK = ("BrosSpadeEEForTokenClassification",)

# Keypoint matchers: their pixels are image pairs.
IMAGE_PAIRS = ("efficientloftr", "lightglue", "superglue")


def _codebooks(model: Any) -> Any:
    return getattr(model.config, "num_codebooks", None)


def masked_patches(config: Any) -> torch.Tensor:
    """(batch, patches) with every other patch masked (the same count per row, as pre-training needs)."""
    size, patch = getattr(config, "image_size", 32), getattr(config, "patch_size", 8)
    frames = (getattr(config, "num_frames", 1) or 1) // (getattr(config, "tubelet_size", 1) or 1)
    count = max(1, frames) * (size // patch) ** 2
    return (torch.arange(count) % 2 == 0).expand(BATCH, -1).contiguous()


def _signature(model: Any) -> inspect.Signature:
    """The signature of the model's forward code (under its decorators)."""
    forward = type(model).forward
    while hasattr(forward, "__wrapped__"):
        forward = forward.__wrapped__
    return inspect.signature(forward)


def _is_video(model: Any) -> bool:
    """Whether the model's pixels are clips (its vision config counts frames)."""
    vision = _vision(model.config)
    return isinstance(getattr(vision, "num_frames", None), int) and (
        isinstance(getattr(vision, "tubelet_size", None), (int, list, tuple)) or "clip" in type(model).__module__
    )


def _placeholder_tokens(config: Any) -> bool:
    """Whether the config names image/video/audio placeholder tokens (a model that embeds media in text)."""
    return any(
        ("image" in name or "video" in name or "audio" in name) and name.endswith(("_token_id", "_token_index"))
        for name in dir(config)
        if getattr(config, name, None) is not None
    )
