"""Inputs for a tiny model, chosen from its class's `main_input_name`, forward signature and config.

Token ids avoid every special token id the config names (a stray image placeholder would make a
multimodal model look for image features). Encoder-decoders also get `decoder_input_ids`.
Everything is drawn from fixed-seed generators, so two calls give equal tensors.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

__all__ = ["build_inputs", "forward_parameters"]

BATCH = 2
SEQ = 7


def forward_parameters(model: Any) -> set[str]:
    """The parameter names of the model's forward code (under its decorators)."""
    forward = type(model).forward
    while hasattr(forward, "__wrapped__"):
        forward = forward.__wrapped__
    return set(inspect.signature(forward).parameters)


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
    features = getattr(config, "input_feat_per_channel", None) or getattr(config, "feature_size", None) or 80
    channels = getattr(config, "input_channels", 1)
    return torch.randn(BATCH, 64, features * channels, generator=_generator(seed))


def input_values(config: Any, seed: int = 5) -> torch.Tensor:
    return torch.randn(BATCH, 1600, generator=_generator(seed))


BUILDERS = {
    "input_ids": token_ids,
    "pixel_values": pixel_values,
    "input_features": input_features,
    "input_values": input_values,
}


def build_inputs(model: Any) -> dict[str, Any]:
    """Keyword inputs for one forward of `model`: its main input, decoder ids for encoder-decoders,
    pixels for dual encoders, `use_cache=False` where the forward takes it."""
    config = model.config
    parameters = forward_parameters(model)
    main = getattr(type(model), "main_input_name", "input_ids")
    if main not in BUILDERS or main not in parameters:
        main = next((name for name in BUILDERS if name in parameters), main)
    if main not in BUILDERS:
        raise NotImplementedError(f"no input builder for main input {main!r}")
    inputs = {main: BUILDERS[main](config)}
    name = type(model).__name__
    encoder_decoder = getattr(config, "is_encoder_decoder", False)
    if main == "input_ids":
        if name.endswith("ForMultipleChoice"):
            inputs[main] = torch.stack([inputs[main], token_ids(config, seed=6)], dim=1)  # (batch, choices, seq)
        if name.endswith("ForSequenceClassification") and encoder_decoder and config.eos_token_id is not None:
            inputs[main][:, -1] = config.eos_token_id  # the head pools at the (one) end-of-sequence token
        if "pixel_values" in parameters and not _placeholder_tokens(config):
            inputs["pixel_values"] = pixel_values(config)  # a dual encoder (CLIP-like): both towers run
    if "use_cache" in parameters:
        inputs["use_cache"] = False  # a cache is not what is compared; hybrid (linear attention) caches refuse some calls
    if "decoder_input_ids" in parameters and encoder_decoder and not name.endswith("ForSequenceClassification"):
        inputs["decoder_input_ids"] = token_ids(config, length=5, seed=2)
    return inputs


def _placeholder_tokens(config: Any) -> bool:
    """Whether the config names image/video/audio placeholder tokens (a model that embeds media in text)."""
    return any(
        ("image" in name or "video" in name or "audio" in name) and name.endswith(("_token_id", "_token_index"))
        for name in dir(config) if getattr(config, name, None) is not None
    )
