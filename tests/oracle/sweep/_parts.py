"""Inputs for the standalone parts of models: encoders and decoders their parent model feeds.

DETR-style detection models: a detection model feeds its encoder and decoder what no generic builder makes: a feature pyramid
(the hybrid encoders of RT-DETR, D-FINE, DEIMv2 and PP-DocLayout take a list of maps, each half the
size of the one before), flattened multi-scale features with their level shapes, start indices and
valid ratios (deformable attention), query embeddings with reference boxes, and position embeddings
for queries and features. `detection_inputs` builds them from the module's forward signature and
config; the shapes follow what the full model hands over (levels halving from 8 x 8, the config's
`num_queries` queries).

Hybrid encoders write into the list they are given (`feature_maps[i] = aifi(...)`): the reference and
each variant still see the same pyramid, since every forward of the sweep gets fresh copies of its
inputs (`_compare.fresh`).

Vision encoders with rotary positions (DINOv3 style): the parent computes (cos, sin) for the image's
patches with its `*RopePositionEmbedding` module; the encoder takes them with the patch tokens and
the prefix (class and register) tokens. Layout encoders (BROS): the parent embeds the boxes into
pairwise position embeddings, here with the family's `*BboxEmbeddings` module. Conditioned mask
decoders (CLIPSeg): the vision layers the parent extracts and the prompt's projected embedding.
SAM3's DETR encoder, DETR decoder and mask decoder: image features (a map, its flattened tokens or
an FPN of maps), position encodings, prompt (text) features with a padding mask, queries.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["part_inputs"]

BATCH = 2
SEQ = 7  # tokens of a layout encoder
QUERIES = 5  # when the config names no query count
SIDE = 8  # the first level's side; each further level halves it

# Forward parameters that mark a DETR-style encoder or decoder fed by its parent model.
DETECTION_PARAMETERS = frozenset(
    (
        "reference_points",
        "spatial_shapes",
        "spatial_shapes_list",
        "valid_ratios",
        "spatial_position_embeddings",
        "object_queries_position_embeddings",
    )
)

# A forward taking one of these is a whole model, not a part fed by its parent.
MAIN_INPUTS = frozenset(("input_ids", "pixel_values", "pixel_values_videos", "input_features", "input_values"))


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _sides(levels: int) -> list[int]:
    return [max(1, SIDE >> level) for level in range(levels)]


def pyramid(model: Any, seed: int = 20) -> dict[str, Any] | None:
    """A hybrid encoder's feature pyramid: one (batch, channels, side, side) map per input level,
    sides halving from 8. Maps carry `encoder_hidden_dim` channels (the parent projects them), or the
    backbone's `encoder_in_channels` where the encoder projects them itself (an `input_proj`)."""
    config = model.config
    channels = getattr(config, "encoder_in_channels", None)
    hidden = getattr(config, "encoder_hidden_dim", None)
    if not isinstance(channels, list) or not isinstance(hidden, int):
        return None
    if not hasattr(model, "input_proj"):
        channels = [hidden] * len(channels)
    g = _generator(seed)
    maps = [torch.randn(BATCH, c, side, side, generator=g) for c, side in zip(channels, _sides(len(channels)))]
    inputs: dict[str, Any] = {"inputs_embeds": maps}
    x4 = getattr(config, "x4_feat_dim", None)
    if isinstance(x4, int):  # PP-DocLayoutV3: the stride-4 backbone map for the mask branch, twice the first side
        inputs["x4_feat"] = (torch.randn(BATCH, x4, 2 * SIDE, 2 * SIDE, generator=g),)
    return inputs


def _levels(model: Any) -> int:
    """The number of feature levels the model's deformable attention samples (its `n_levels`)."""
    for module in model.modules():
        levels = getattr(module, "n_levels", None)
        if isinstance(levels, int) and not isinstance(levels, bool):
            return levels
    return getattr(model.config, "num_feature_levels", None) or 1


def multiscale(model: Any, parameters: set[str], seed: int = 21) -> dict[str, Any]:
    """Flattened multi-scale features and what a DETR-style encoder or decoder reads with them:
    level shapes (a tensor and a list), level start indices, valid ratios of 1, position embeddings,
    and for a decoder `num_queries` queries with reference boxes in [0, 1] (read as logits by the decoders
    that squash them). The parameter `inputs_embeds` is the features for an encoder (no
    `encoder_hidden_states` parameter), the queries for a decoder."""
    config = model.config
    width = getattr(config, "d_model", None) or getattr(config, "hidden_size")
    levels = _levels(model)
    shapes = [(side, side) for side in _sides(levels)]
    length = sum(h * w for h, w in shapes)
    g = _generator(seed)
    decoder = "encoder_hidden_states" in parameters
    queries = getattr(config, "num_queries", None) or QUERIES  # some heads are sized by it (a pairwise order)
    found: dict[str, Any] = {
        "inputs_embeds": torch.randn(BATCH, queries if decoder else length, width, generator=g),
        "encoder_hidden_states": torch.randn(BATCH, length, width, generator=g),
        "spatial_position_embeddings": torch.randn(BATCH, length, width, generator=g),
        "object_queries_position_embeddings": torch.randn(BATCH, queries, width, generator=g),
        "reference_points": torch.rand(BATCH, queries, getattr(config, "num_coords", None) or 4, generator=g),
        "spatial_shapes": torch.tensor(shapes, dtype=torch.long),
        "spatial_shapes_list": shapes,
        "level_start_index": torch.tensor([0, *torch.tensor([h * w for h, w in shapes]).cumsum(0)[:-1].tolist()]),
        "valid_ratios": torch.ones(BATCH, levels, 2),
    }
    return {name: value for name, value in found.items() if name in parameters}


def parent_heads(model: Any, seed: int = 22) -> dict[str, Any]:
    """PP-DocLayoutV3's decoder runs heads its parent model owns and passes in (a norm, the mask-query
    and reading-order heads, the encoder's mask features): built here as the parent builds them."""
    import sys

    config, module = model.config, sys.modules[type(model).__module__]
    prefix = type(model).__name__.removesuffix("Decoder")
    width, prototypes = config.d_model, config.num_prototypes
    torch.manual_seed(seed)
    return {
        "order_head": torch.nn.ModuleList([torch.nn.Linear(width, width) for _ in range(config.decoder_layers)]),
        "global_pointer": getattr(module, f"{prefix}GlobalPointer")(config),
        "mask_query_head": getattr(module, f"{prefix}MLPPredictionHead")(width, width, prototypes, num_layers=3),
        "norm": torch.nn.LayerNorm(width, eps=config.layer_norm_eps),
        "mask_feat": torch.randn(BATCH, prototypes, 2 * SIDE, 2 * SIDE, generator=_generator(seed)),
    }


def rope_encoder(model: Any, seed: int = 23) -> dict[str, Any] | None:
    """A DINOv3-style encoder's tokens (class, registers, then one per patch of a config-sized image)
    and the rotary (cos, sin) its parent computes for that image, with the family's own module."""
    import sys

    config, module = model.config, sys.modules[type(model).__module__]
    rope_cls = next((v for k, v in vars(module).items() if k.endswith("RopePositionEmbedding")), None)
    if rope_cls is None:
        return None
    size, patch = config.image_size, config.patch_size
    height, width = (size, size) if isinstance(size, int) else tuple(size)
    g = _generator(seed)
    pixels = torch.randn(BATCH, config.num_channels, height, width, generator=g)
    with torch.no_grad():
        position_embeddings = rope_cls(config).eval()(pixels)
    tokens = 1 + (getattr(config, "num_register_tokens", 0) or 0) + (height // patch) * (width // patch)
    hidden = torch.randn(BATCH, tokens, config.hidden_size, generator=g)
    return {"hidden_states": hidden, "position_embeddings": position_embeddings}


def box_encoder(model: Any, seed: int = 24) -> dict[str, Any] | None:
    """A BROS-style encoder's token states and the pairwise box embeddings its parent computes from
    normalised boxes (four corners, scaled by `bbox_scale`), with the family's own module."""
    import sys

    config, module = model.config, sys.modules[type(model).__module__]
    embed_cls = next((v for k, v in vars(module).items() if k.endswith("BboxEmbeddings")), None)
    if embed_cls is None:
        return None
    g = _generator(seed)
    boxes = torch.rand(BATCH, SEQ, getattr(config, "dim_bbox", 8), generator=g) * getattr(config, "bbox_scale", 1.0)
    torch.manual_seed(seed)
    with torch.no_grad():
        positions = embed_cls(config).eval()(boxes)
    return {"hidden_states": torch.randn(BATCH, SEQ, config.hidden_size, generator=g), "bbox_pos_emb": positions}


def conditioned_decoder(model: Any, seed: int = 25) -> dict[str, Any]:
    """CLIPSeg's decoder: one (batch, 1 + patches, vision width) state per extracted vision layer
    (the parent's `extract_layers`) and a (batch, projection_dim) prompt embedding."""
    config = model.config
    vision = config.vision_config
    tokens = 1 + (vision.image_size // vision.patch_size) ** 2
    g = _generator(seed)
    states = tuple(torch.randn(BATCH, tokens, vision.hidden_size, generator=g) for _ in config.extract_layers)
    return {"hidden_states": states, "conditional_embeddings": torch.randn(BATCH, config.projection_dim, generator=g)}


def prompted_detector(model: Any, parameters: set[str], seed: int = 26) -> dict[str, Any]:
    """SAM3's DETR encoder (image features and their position encoding as one-level lists of maps),
    DETR decoder (the same flattened, with the level's shape) and mask decoder (queries, an FPN of
    `num_upsampling_stages + 1` maps from fine to coarse, the encoder's tokens for the coarsest), each
    with prompt features whose second row ends in one padding token."""
    width = model.config.hidden_size
    g = _generator(seed)
    side = SIDE // 2
    prompt = torch.randn(BATCH, SEQ, width, generator=g)
    valid = torch.ones(BATCH, SEQ, dtype=torch.bool)
    valid[1, -1] = False
    if "decoder_queries" in parameters:
        levels = _sides((model.config.num_upsampling_stages or 0) + 1)
        maps = [torch.randn(BATCH, width, 2 * s, 2 * s, generator=g) for s in levels]
        coarsest = maps[-1].shape[-1] ** 2
        return dict(
            decoder_queries=torch.randn(BATCH, QUERIES, width, generator=g),
            backbone_features=maps,
            encoder_hidden_states=torch.randn(BATCH, coarsest, width, generator=g),
            prompt_features=prompt,
            prompt_mask=valid,
        )
    if "vision_pos_embeds" in parameters:  # the encoder
        return dict(
            vision_features=[torch.randn(BATCH, width, side, side, generator=g)],
            text_features=prompt,
            vision_pos_embeds=[torch.randn(BATCH, width, side, side, generator=g)],
            text_mask=valid,
        )
    return {
        "vision_features": torch.randn(BATCH, side * side, width, generator=g),
        "text_features": prompt,
        "vision_pos_encoding": torch.randn(BATCH, side * side, width, generator=g),
        "text_mask": valid,
        "spatial_shapes": torch.tensor([[side, side]]),
    }


def part_inputs(model: Any, parameters: set[str]) -> dict[str, Any] | None:
    """The inputs of a standalone part fed by its parent model (a detection encoder or decoder, a
    rotary vision encoder), or None for any other model (the generic builders make its inputs)."""
    if parameters & MAIN_INPUTS:
        return None  # a whole model (SigLIP 2 also takes `spatial_shapes`)
    if {"hidden_states", "position_embeddings"} <= parameters and "inputs_embeds" not in parameters:
        return rope_encoder(model)
    if {"hidden_states", "bbox_pos_emb"} <= parameters:
        return box_encoder(model)
    if {"hidden_states", "conditional_embeddings"} <= parameters:
        return conditioned_decoder(model)
    if {"vision_features", "text_features"} <= parameters or {"decoder_queries", "backbone_features"} <= parameters:
        return prompted_detector(model, parameters)
    if "inputs_embeds" not in parameters:
        return None
    if DETECTION_PARAMETERS & parameters:
        inputs = multiscale(model, parameters)
        if {"mask_query_head", "mask_feat"} <= parameters:
            inputs.update(parent_heads(model))
        return inputs
    return pyramid(model)
