"""Tiny configs for any transformers model class: generic shrinking plus per-family overrides.

Generic shrinking rebuilds the class's default config (and each of its sub-configs) with small sizes:
two layers, hidden size 32, four heads, few experts, 32-pixel images, short audio. Sizes are only
lowered, never raised. Fields derived from others (per-layer type lists) are dropped so the config
derives them again, unless the re-derived pattern loses a kind of layer the full model has; other
per-layer lists and layer-indexed dicts follow the lowered layer count. Fields some defaults leave
None but their models read as numbers are filled (`FILL`); multimodal rotary sections, Mamba head
widths and feature-layer indices are fitted to the small sizes. The vocabulary stays large enough
to hold every special token id the config names, so multimodal placeholder tokens keep their
meaning. Families where that is not enough get explicit overrides in `OVERRIDES` (applied to the
config, or to any sub-config, of that model type), `SUB_OVERRIDES` (one sub-config of one parent
type); `REDERIVED` names computed fields to leave out so the config computes them again. Per class:
`CLASS_SUBCONFIGS` (stacks built from a part of their composite config), `CLASS_PREFIXES` (parts whose
fields carry a prefix) and `CLASS_OVERRIDES` (the root config of one class).
"""

from __future__ import annotations

import copy
import inspect
from typing import Any

__all__ = ["tiny_config", "LEVELS", "SIZES", "OVERRIDES"]

LAYERS = 2
HIDDEN = 32
HEADS = 4

# The layer counts: what the "layers" level lowers (the fallback when shrinking every size fails) and what
# per-layer lists follow. Named apart from SIZES' other fields: key/value heads and expert groups also
# shrink to 2, but are not layer counts.
_LAYER_COUNTS = (
    "num_hidden_layers", "num_layers", "n_layer", "n_layers", "encoder_layers", "decoder_layers",
    "num_encoder_layers", "num_decoder_layers", "depth", "num_decoder_hidden_layers",
)  # fmt: skip
LAYER_FIELDS = frozenset(_LAYER_COUNTS)

# Field name -> the value it is lowered to (when the default is an int larger than it).
SIZES: dict[str, int] = {
    **dict.fromkeys(_LAYER_COUNTS, LAYERS),
    **dict.fromkeys(("hidden_size", "d_model", "n_embd", "embed_dim", "embedding_size", "hidden_dim"), HIDDEN),
    **dict.fromkeys(("intermediate_size", "encoder_ffn_dim", "decoder_ffn_dim", "ffn_dim", "d_ff", "mlp_dim"), 48),
    **dict.fromkeys(("moe_intermediate_size", "shared_expert_intermediate_size", "expert_intermediate_size"), 16),
    **dict.fromkeys(
        (
            "num_attention_heads",
            "n_head",
            "n_heads",
            "encoder_attention_heads",
            "decoder_attention_heads",
            "num_heads",
            "attention_heads",
        ),
        HEADS,
    ),
    "num_key_value_heads": 2,
    "head_dim": HIDDEN // HEADS,
    "d_kv": HIDDEN // HEADS,
    **dict.fromkeys(("num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts"), 4),
    **dict.fromkeys(("num_experts_per_tok", "num_experts_per_token", "moe_k"), 2),
    **dict.fromkeys(("n_group", "num_expert_group"), 2),
    "topk_group": 1,
    **dict.fromkeys(("first_k_dense_replace", "num_dense_layers"), 1),  # one dense layer, then MoE layers
    "mamba_n_heads": 4,
    "mamba_d_head": 16,
    "mamba_d_ssm": 64,
    "mamba_d_state": 16,
    "kv_lora_rank": 16,
    "q_lora_rank": 16,
    "qk_nope_head_dim": 8,
    "qk_rope_head_dim": 8,
    "v_head_dim": 8,
    "qk_head_dim": 16,  # qk_nope_head_dim + qk_rope_head_dim
    "projection_dim": 16,
    "projection_size": HIDDEN,
    "image_size": 32,
    "patch_size": 8,
    "max_source_positions": 16,
    "max_target_positions": 64,
    "n_positions": 64,
    "word_embed_proj_dim": HIDDEN,
    "upsample_groups": HIDDEN,  # grouped convolutions over the (lowered) hidden size
    # Every k-th layer sparse: k no larger than the lowered layer count keeps one sparse layer (NLLB-MoE: 4).
    **dict.fromkeys(("encoder_sparse_step", "decoder_sparse_step"), LAYERS),
}

# Fields that some configs leave None (and their models read as-is) -> the value they get: `None` lets
# `_fill` derive it (head_dim = hidden // heads; MLA keeps one key/value head per query head).
FILL: dict[str, Any] = {
    "head_dim": None,
    "num_key_value_heads": None,
    "vocab_size": 99,
    "num_experts_per_tok": 2,
    "n_routed_experts": 4,
    "n_shared_experts": 1,
}

# Fields recomputed from the others when absent.
DERIVED = (
    "layer_types",
    "mlp_layer_types",
    "transformers_version",
    "architectures",
    "_name_or_path",
    "out_features",
    "out_indices",
    "stage_names",
    "feature_size",
    "image_embedding_size",
)
# Single layer indices besides feature layers (MiniCPM-V's vision merger runs after layer `insert_layer_id`).
LAYER_INDEX_FIELDS = ("insert_layer_id",)
LEVELS = ("small", "layers")

# model_type -> fields set on every config (or sub-config) of that type, after shrinking.
OVERRIDES: dict[str, dict[str, Any]] = {
    "deepseek_v3": {"first_k_dense_replace": 1, "n_group": 2, "topk_group": 1},
    "t5": {"decoder_start_token_id": 0},  # what T5's checkpoints set; heads shift input_ids with it
    # Defaults that name no rotary parameters per layer type (checkpoints do).
    "cohere_compass_text": {"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 10000.0}}},
    "lfm2_moe": {"layer_types": ["conv", "full_attention"]},  # no default layer pattern
    "esmc": {"num_key_value_heads": None},  # no grouped-query attention (None: as many as query heads)
    "xmod": {"default_language": "en_XX"},  # adapters need a language
    # Time series: no default horizon; a short context and few lags keep the series short.
    **{
        family: {"prediction_length": 4, "context_length": 8, "lags_sequence": [1, 2, 3], "num_time_features": 1}
        for family in ("time_series_transformer", "informer")
    },
    "autoformer": {
        "prediction_length": 4,
        "context_length": 8,
        "lags_sequence": [1, 2, 3],
        "num_time_features": 1,
        "label_length": 4,  # the decoder starts from the context's last `label_length` steps
    },
    "mistral4": {"head_dim": 16},  # half of it rotates (rope partial_rotary_factor 0.5): qk_rope_head_dim 8
    # Class embeddings of image patches are compared with projected text queries: one width for both.
    **{family: {"projection_dim": HIDDEN} for family in ("owlvit", "owlv2")},
    # The image encoder's neck feeds the prompt/mask decoders, whose width is the (lowered) hidden size.
    **{
        family: {"output_channels": HIDDEN, "num_pos_feats": HIDDEN // 2}
        for family in ("sam_vision_model", "sam_hq_vision_model")
    },
    "bridgetower_vision_model": {"hidden_size": 64},  # one attention head per 64 channels
    "gemma3n_text": {"num_kv_shared_layers": 0},  # the default shares the cache of layers a 2-layer model lacks
    # Its indexed-attention layers need an indexer budget the default leaves unset: linear attention only.
    "qwen4_exp_text": {"layer_types": ["linear_attention", "linear_attention"]},
    # Text-line recognisers pool the image height away: a 48 (mobile: 96) x 320 line.
    **{family: {"image_size": [48, 320]} for family in ("pp_ocrv5_server_rec", "pp_ocrv6_small_rec")},
    "pp_ocrv5_mobile_rec": {"image_size": [96, 320]},
    # Hybrid and sparse layer patterns whose first two layers are all of one kind: one layer of each.
    "jamba": {"attn_layer_period": 2, "attn_layer_offset": 1},
    "mllama_text_model": {"cross_attention_layers": [1]},
    # Its global encoder's layers and the encoder layers whose states it stacks (indices of the full model).
    "mllama_vision_model": {"num_global_layers": 2, "intermediate_layers_indices": [0, 1]},
    "recurrent_gemma": {"block_types": ["recurrent", "attention"]},
    # Image-token vocabularies ship with checkpoints (the default is None, which the model cannot build):
    # only the placeholder, so the model runs on text and its ids avoid it.
    **{family: {"vocabulary_map": {"<image>": 98}, "image_token_id": 98} for family in ("chameleon", "emu3")},
    "janus_vqgan": {"num_patches": 2},  # latent grid side: a 32-pixel image downsampled 4 times (5 levels)
    "deepseek_ocr2_text": {"mlp_layer_types": ["dense", "sparse"]},  # no default pattern: one layer of each
    "molmo2_vision": {"num_position_embeddings": 16},  # one per patch: a 32-pixel image of 8-pixel patches
    "unlimited_ocr_text": {"num_key_value_heads": None},  # its eager attention does not repeat grouped key/value heads
    "gemma4_vision": {"pooling_kernel_size": 2},  # pools 2 x 2 patches: four soft tokens from a 4 x 4 grid
    # Deep-stack projectors: the default maps no vision layer to a language layer, and its spatial targets
    # are layers 12-21 of the full model.
    "granite4_vision": {
        "deepstack_layer_map": [[0, 0]],
        "spatial_target_layers": [0, 1, 0, 1],
        "downsample_rate": "1/2",
    },
    # Its rotary embedding always splits by multimodal sections (the checkpoint's four axes: position, width,
    # height, image index); the default names none. One frequency pair per axis fills the half head of 4.
    "hunyuan_vl_text": {
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [1, 1, 1, 1]},
    },
    # 4 coordinates + 2 sizes = hidden size 32; 32-pixel images (its visual position table follows `input_size`)
    "layoutlmv3": {"coordinate_size": 4, "shape_size": 8, "input_size": 32},
    "lw_detr_vit": {"num_windows": 4},  # the image side per window row must split into whole windows
    # The default names no feature level (checkpoints do; the fields derived from it are set with it), and
    # fewer queries than the 4 x 4 patches of a 32-pixel image: each query group picks its top proposals.
    "lw_detr": {
        "projector_scale_factors": [1.0],
        "num_feature_levels": 1,
        "projector_in_channels": [HIDDEN],
        "projector_out_channels": HIDDEN,
        "num_queries": 8,
    },
    "rf_detr": {"num_queries": 8},
    # Stage widths ending at the hidden size, one block per stage. The fields the config derives from them are
    # written out: the shrunk defaults passed back would override what it derives.
    "efficientloftr": {
        "out_features": [16, 16, 32, 32],
        "stage_num_blocks": [1, 1, 1, 1],
        "stage_in_channels": [1, 16, 16, 32],
        "stage_block_stride": [[2], [1], [2], [2]],
        "stage_block_out_channels": [[16], [16], [32], [32]],
        "stage_block_in_channels": [[1], [16], [16], [32]],
        "fine_fusion_dims": [32, 32, 16],
        "intermediate_size": 2 * HIDDEN,
        "num_key_value_heads": HEADS,
        # 2-D rotary positions fill half the hidden size: head_dim * factor = hidden / 2 (4.0 for 8 heads).
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": HEADS / 2},
    },
    "bros": {"dim_bbox_projection": HIDDEN // HEADS},  # box positions are scored against each head's queries
    "clipseg": {"extract_layers": [0, 1]},  # the decoder reads these vision layers (default 3, 6 and 9)
    "uvdoc_backbone": {"out_indices": [1, 2, 3, 4, 5, 6]},  # the head fuses every bridge stage's features
    "uvdoc": {"image_size": 64},  # the head's 5 x 5 reflect-padded convolutions need a 4 x 4 map (stride 16)
    # Its first and last layers are RepMixer blocks: three layers keep one attention layer (the map's recorders).
    "sam3_lite_text_text_model": {"num_hidden_layers": 3},
    # Hiera stages at a third of the default widths, one block each but two in the second (its second global: a
    # pooling block cannot be global), windows that fit the 8 x 8 patch grid of a 32-pixel image; the vision
    # neck reads those widths and hands the mask decoder maps of the first three stages' sizes.
    "sam2_hiera_det_model": {
        "embed_dim_per_stage": [HIDDEN, 2 * HIDDEN, 4 * HIDDEN, 8 * HIDDEN],
        "blocks_per_stage": [1, 2, 1, 1],
        "global_attention_blocks": [2],
        "window_size_per_stage": [4, 2, 2, 2],
    },
    "sam2_vision_model": {
        "backbone_channel_list": [8 * HIDDEN, 4 * HIDDEN, 2 * HIDDEN, HIDDEN],
        "backbone_feature_sizes": [[8, 8], [4, 4], [2, 2]],
    },
    "sam2_prompt_encoder": {"patch_size": 16},  # dense prompts match the image embedding: stride 16 (2 x 2)
    # The FPN (scales 4, 2, 1 of the 4 x 4 patch grid) hands the tracker's mask decoder maps of these sizes.
    "sam3_vision_model": {"backbone_feature_sizes": [[16, 16], [8, 8], [4, 4]]},
    # The segmentation head's FPN reads four distinct layers (the default reads only the last): four layers.
    "beit": {"num_hidden_layers": 4, "out_indices": [1, 2, 3, 4]},
    # A neck of two stages (the default's four read layers 2, 5, 8 and 11): the two lowered layers' outputs.
    "dpt": {"backbone_out_indices": [0, 1], "neck_hidden_sizes": [16, 32], "reassemble_factors": [2, 1]},
    "prompt_depth_anything": {
        "neck_hidden_sizes": [16, 32],
        "reassemble_factors": [2, 1],
        "backbone_config": {
            "model_type": "dinov2",
            "hidden_size": HIDDEN,
            "num_hidden_layers": LAYERS,
            "num_attention_heads": HEADS,
            "image_size": 32,
            "patch_size": 8,
            "out_indices": [1, 2],
            "reshape_hidden_states": False,
        },
    },
    # The queries join for the last `num_blocks` layers (default 4, more than the 2 lowered layers): the last one.
    **{family: {"num_blocks": 1} for family in ("eomt", "eomt_dinov3")},
    # The default has no dense-prediction head (each checkpoint names its own): two upsampling blocks, one
    # refinement conv, and the pointmap head's focal-length scale branch. Key/value heads per layer are
    # derived again from the lowered head counts: one full-attention layer, then one grouped-query layer.
    "sapiens2": {
        "num_key_value_heads_per_layer": None,
        "num_key_value_attention_heads": 2,
        "num_first_full_attention_layers": 1,
        "num_last_full_attention_layers": 0,
        "head_config": {
            "upsample_out_channels": [16, 16],
            "conv_out_channels": [16],
            "scale_conv_out_channels": [16],
            "scale_final_hidden_sizes": [16, 16],
        },
    },
    # Adapters from the audio and vision towers into the text model: their widths must match both sides.
    "dots3_note_vision_encoder": {"adapter_in_dim": HIDDEN, "adapter_out_dim": HIDDEN},
    "dots3_note_audio_encoder": {"adapter_input_size": HIDDEN, "adapter_out_dim": HIDDEN},
    "diffusion_gemma_text": {"num_experts": 4, "top_k_experts": 2, "moe_intermediate_size": 16},  # every layer MoE
    "qwen3_omni_moe_talker_text": {"shared_expert_intermediate_size": 16},  # read by its MoE, absent from its config
    # Value projections as wide as the queries: as many key/value heads as query heads.
    **{
        family: {"num_key_value_heads": HEADS}
        for family in (
            "nemotron3_diarization_audio",
            "nemotron3_5_transcribe_asr_audio",
            "nemotron3_5_transcribe_word_timestamp",
            "granite_speech5_encoder",
        )
    },
    "flint": {"mlp_only_layers": [0]},  # the default makes layers 0 and 1 dense: a MoE layer second
    "step3p5": {"sliding_window": 4},  # Step3p7's text config: its forward builds a sliding mask whatever the layers
    # The text-to-unit model's sizes (its part of the config is named with a `t2u_` prefix).
    "seamless_m4t_v2": {
        "t2u_encoder_layers": LAYERS,
        "t2u_decoder_layers": LAYERS,
        "t2u_encoder_ffn_dim": 48,
        "t2u_decoder_ffn_dim": 48,
        "t2u_encoder_attention_heads": HEADS,
        "t2u_decoder_attention_heads": HEADS,
        "t2u_variance_predictor_embed_dim": HIDDEN,
        "t2u_variance_predictor_hidden_dim": 16,
    },
    "moonshine_streaming": {"num_key_value_heads": HEADS},  # read by its decoder's attention (as its head count)
    # The quantizer reads the acoustic and semantic states side by side (twice the lowered hidden size); the
    # decoder's rotary embedding is applied before keys are grouped (as many key/value heads as query heads).
    **{family: {"quantization_dim": 2 * HIDDEN, "num_key_value_heads": HEADS} for family in ("xcodec2", "neucodec")},
    "xlstm": {"embedding_dim": None, "num_blocks": None},  # aliases of hidden_size and num_hidden_layers: derived
    # CLVP's speech encoder reads the ids its speech decoder predicts (below 8194, the decoder's stop token + 1);
    # its rotary embedding spans at least 32 channels of each head: heads 32 wide.
    "clvp_encoder": {"vocab_size": 8194, "hidden_size": 4 * HIDDEN},
    # BLT's local encoder and decoder project to and from the global transformer's (lowered) width; fewer
    # hash buckets for its byte n-gram embeddings.
    **{family: {"hidden_size_global": HIDDEN} for family in ("blt_local_encoder", "blt_local_decoder")},
    "blt": {"encoder_hash_byte_group_vocab": 1024},
    # Set by the encoder-decoder config on its parts; read by the parts built alone.
    **{family: {"dropout_rate": 0.0} for family in ("t5gemma2_decoder", "t5gemma2_text")},
    # Its hybrid layers share one transformer, tied from the first to the others: two of them, and a Mamba layer.
    # Its attention widths are derived (twice the hidden size) when None.
    "zamba": {
        "num_hidden_layers": 3,
        "layers_block_type": ["linear_attention", "hybrid", "hybrid"],
        "attention_hidden_size": None,
        "attention_head_dim": None,
    },
    # Its attention reads a field its config class lacks, and clamps with `clip_qkv` (None fails): the checkpoint's.
    "dbrx": {"attn_config": {"rope_theta": 500000.0, "clip_qkv": 8.0}},
    # Its input, recurrent and output layers must add up to the layer count (its `to_dict` doubles every count
    # and lists an `mlp` block per layer, which `__post_init__` halves again): one of each, the pattern derived.
    "dory": {
        "num_hidden_layers": 3,
        "n_input_layers": 1,
        "n_recurrent_layers": 1,
        "n_output_layers": 1,
        "layer_types": None,
    },
}


# (parent model_type, sub-config name) -> fields set on that sub-config only (the same sub-config type
# elsewhere keeps its defaults).
SUB_OVERRIDES: dict[tuple[str, str], dict[str, Any]] = {
    # The neck fuses the four stages the parent's default backbone names (the generic shrinking drops them).
    ("pp_ocrv5_mobile_det", "backbone_config"): {"out_indices": [2, 3, 4, 5]},
}

# model_type -> fields its config's `__post_init__` computes from others but which are no dataclass fields:
# passed back to the constructor, they would land as extra attributes over the recomputed values.
REDERIVED: dict[str, tuple[str, ...]] = {
    "zamba2": (
        "attention_hidden_size",
        "attention_head_dim",
        "mamba_headdim",
        "kv_channels",
        "num_query_groups",
        "hybrid_layer_ids",
    ),
    "dots3_note_audio_encoder": ("conv_output_size", "samples_per_token"),
}


def _special_token_ids(values: dict[str, Any]) -> list[int]:
    return [
        v
        for k, v in values.items()
        if k.endswith(("_token_id", "_token_index")) and isinstance(v, int) and not isinstance(v, bool)
    ]


def _layer_count(values: dict[str, Any]) -> int | None:
    counts = [v for k, v in values.items() if k in LAYER_FIELDS and isinstance(v, int) and not isinstance(v, bool)]
    return max(counts) if counts else None


def _pick(items: list[Any], count: int) -> list[Any]:
    """`count` entries of a per-layer list, in order, covering as many distinct values as fit (so a
    hybrid model keeps one layer of each kind rather than its first two layers of the same kind)."""
    firsts: dict[Any, int] = {}
    for index, item in enumerate(items):
        firsts.setdefault(repr(item), index)
    chosen = sorted(firsts.values())[:count]
    chosen += [i for i in range(len(items)) if i not in chosen][: count - len(chosen)]
    return [items[i] for i in sorted(chosen)]


def _lowered(key: str, value: Any) -> Any:
    target = SIZES.get(key)
    if target is None and key.endswith("_hidden_size"):
        target = HIDDEN  # another tower's width, named where this one must match it (e.g. `text_hidden_size`)
    if target is not None and isinstance(value, int) and not isinstance(value, bool) and value > target:
        return target
    if target is not None and isinstance(value, list) and value and all(isinstance(v, int) for v in value):
        return [min(v, target) for v in value]  # e.g. image_size [800, 1333]
    return value


def _index(key: Any) -> int | None:
    """A layer index written as a dict key (`5` or `"05"`), else None."""
    if isinstance(key, int) and not isinstance(key, bool):
        return key
    return int(key) if isinstance(key, str) and key.isdigit() else None


def _per_layer(values: dict[str, Any], before: int | None, after: int | None, level: str) -> None:
    """Per-layer fields follow the lowered layer count: lists as long as the old count keep `after`
    entries (see `_pick`; sizes in them are lowered too), dicts keyed by layer index keep their first
    entry, moved to the last remaining layer."""
    if not before or not after or before <= after:
        return
    for key, value in list(values.items()):
        if isinstance(value, list) and len(value) == before and key not in LAYER_FIELDS:
            picked = _pick(value, after)
            values[key] = [_lowered(key, v) for v in picked] if level == "small" else picked
        elif isinstance(value, dict) and value and all(_index(k) is not None for k in value):
            if max(_index(k) for k in value) < after:
                continue
            first = value[min(value, key=_index)]
            if isinstance(first, dict) and level == "small":
                lowered = {k: _lowered(k, v) for k, v in first.items()}
                if "num_key_value_heads" in first and first["num_key_value_heads"] == first.get("num_attention_heads"):
                    lowered["num_key_value_heads"] = lowered["num_attention_heads"]  # no grouped-query attention
                first = lowered
            values[key] = {after - 1: first}


def _feature_layers(values: dict[str, Any], layers: int | None) -> None:
    """Non-negative layer indices a multimodal config reads features from (or inserts a block after, see
    `LAYER_INDEX_FIELDS`), kept inside the lowered count."""
    if not layers:
        return
    for key, value in list(values.items()):
        if "feature_layer" not in key and key not in LAYER_INDEX_FIELDS:
            continue
        if isinstance(value, int) and not isinstance(value, bool) and value >= layers:
            values[key] = layers - 1
        elif isinstance(value, list) and all(isinstance(v, int) for v in value):
            values[key] = [min(v, layers - 1) if v >= 0 else v for v in value]


def _mrope(values: dict[str, Any], default: list[int] | None) -> None:
    """Multimodal rotary sections (Qwen2-VL style) rescaled to sum to half the rotated head width;
    `default` is the section list the modeling code falls back on when the config names none."""
    rope = values.get("rope_parameters")
    if not isinstance(rope, dict):
        return
    if default and "mrope_section" not in rope and isinstance(values.get("num_attention_heads"), int):
        rope["mrope_section"] = list(default)
    for params in [rope, *(v for v in rope.values() if isinstance(v, dict))]:
        sections = params.get("mrope_section")
        head = values.get("head_dim") or (values.get("hidden_size", 0) // max(1, values.get("num_attention_heads") or 1))
        if not isinstance(sections, list) or not head:
            continue
        factor = params.get("partial_rotary_factor", values.get("partial_rotary_factor")) or 1.0
        half = int(head * factor) // 2
        total = sum(sections)
        if total <= half or not half:
            continue
        scaled = [max(1, s * half // total) for s in sections]
        while sum(scaled) > half:
            scaled[scaled.index(max(scaled))] -= 1
        scaled[0] += half - sum(scaled)
        if len(scaled) == 3 and sections[0] == sections[1]:  # equal height and width sections stay equal
            scaled = [min(scaled[:2])] * 2 + [half - 2 * min(scaled[:2])]
        params["mrope_section"] = scaled


def _mamba(values: dict[str, Any]) -> None:
    """Mamba heads that tile the state-space width: d_head = (d_ssm or expand * hidden) // n_heads."""
    heads, hidden = values.get("mamba_n_heads"), values.get("hidden_size")
    if not (isinstance(heads, int) and isinstance(values.get("mamba_d_head"), int) and isinstance(hidden, int)):
        return
    width = values.get("mamba_d_ssm") or (values.get("mamba_expand") or 2) * hidden
    values["mamba_d_head"] = width // heads


def _fill(values: dict[str, Any]) -> None:
    """Fields a config leaves None but its model reads as a number (see FILL)."""
    heads = values.get("num_attention_heads")
    for key, value in FILL.items():
        if key not in values or values[key] is not None:
            continue
        if key == "head_dim" and isinstance(heads, int) and isinstance(values.get("hidden_size"), int):
            values[key] = values["hidden_size"] // heads
        elif key == "num_key_value_heads" and isinstance(heads, int):
            values[key] = heads
        elif value is not None:
            values[key] = value


def _shrunk(config: Any, level: str, mrope: list[int] | None = None, extra: dict[str, Any] | None = None) -> Any:
    """A copy of `config` (a PreTrainedConfig) with small sizes; sub-configs shrunk the same way.

    `level` "small" lowers every field of SIZES; "layers" only the layer counts (widths stay).
    Per-layer lists follow the layer count; `layer_types` is dropped so the config derives it again,
    or (configs that do not derive it) picked like the other per-layer lists."""
    everything = config.to_dict()
    rederived = REDERIVED.get(getattr(config, "model_type", None), ())
    values = {k: v for k, v in everything.items() if k not in DERIVED and k not in rederived}
    before = _layer_count(values)
    for key, value in list(values.items()):
        if level == "small" or key in LAYER_FIELDS:
            values[key] = _lowered(key, value)
    _per_layer(values, before, _layer_count(values), level)
    _feature_layers(values, _layer_count(values) or LAYERS)  # an adapter's indices name a lowered tower's layers
    for name in getattr(config, "sub_configs", {}) or {}:
        sub = getattr(config, name, None)
        if sub is not None and hasattr(sub, "to_dict"):
            values[name] = _shrunk(sub, level, mrope, SUB_OVERRIDES.get((getattr(config, "model_type", None), name)))
    if level == "small" and isinstance(values.get("vocab_size"), int):
        values["vocab_size"] = max([99, *(i + 1 for i in _special_token_ids(values))])
    _fill(values)
    if values.get("kv_lora_rank") and isinstance(values.get("num_attention_heads"), int):
        values["num_key_value_heads"] = values["num_attention_heads"]  # multi-head latent attention: no groups
    if "pad_token_id" in values and values["pad_token_id"] is None:
        values["pad_token_id"] = 0  # sequence classification heads need one for batches > 1
    if "use_cache" in values:
        values["use_cache"] = False  # a cache is not compared; hybrid (linear attention) caches refuse some calls
    _mrope(values, mrope)
    _mamba(values)
    overrides = {**OVERRIDES.get(getattr(config, "model_type", None), {}), **(extra or {})}
    values.update(overrides)
    try:
        shrunk = type(config)(**values)
    except Exception:  # noqa: BLE001 - any validator's error: the per-layer fallback below is tried next
        shrunk = None
    # Layer kinds: the re-derived pattern, unless it lost a kind the full model has (a 2-layer Qwen3.5
    # derives two linear-attention layers; its full-attention layer is picked back).
    kinds = [k for k in ("layer_types", "mlp_layer_types") if isinstance(everything.get(k), list) and k not in overrides]
    kept = {k: everything[k] for k in kinds}
    _per_layer(kept, before, _layer_count(values), level)
    if shrunk is not None and all(_kinds(getattr(shrunk, k, None)) >= _kinds(kept[k]) for k in kinds):
        return shrunk
    try:
        return type(config)(**{**values, **kept})
    except Exception:  # the re-derived config stands when the picked kinds do not validate
        if shrunk is None:
            raise
        return shrunk


def _kinds(items: Any) -> set[str]:
    return {repr(item) for item in items} if isinstance(items, list) else set()


def _set_eager(config: Any) -> None:
    config._attn_implementation = "eager"
    for name in getattr(config, "sub_configs", {}) or {}:
        sub = getattr(config, name, None)
        if sub is not None and hasattr(sub, "to_dict"):
            _set_eager(sub)


# model_type -> `sub_config.field` paths set after the config is built (fields its `__post_init__` derives
# from the shrunk sizes into values no model accepts).
POST_OVERRIDES: dict[str, dict[str, Any]] = {
    "granite4_vision": {"qformer_config.num_attention_heads": 2},  # derived as vision width // 64: 0 heads
}


def _set_path(config: Any, path: str, value: Any) -> None:
    """Set `path` (`field` or `sub_config.field`) on `config`."""
    owner, _, name = path.rpartition(".")
    setattr(getattr(config, owner) if owner else config, name, value)


def _post_overrides(config: Any) -> None:
    """Apply `POST_OVERRIDES` to `config` and (recursively) to its sub-configs."""
    for path, value in POST_OVERRIDES.get(getattr(config, "model_type", None), {}).items():
        _set_path(config, path, value)
    for name in getattr(config, "sub_configs", {}) or {}:
        sub = getattr(config, name, None)
        if sub is not None and hasattr(sub, "to_dict"):
            _post_overrides(sub)


# Class name -> fields (or `sub_config.field` paths) set on its root config (classes used standalone in
# ways the default config does not allow).
CLASS_OVERRIDES: dict[str, dict[str, Any]] = {
    "T5Stack": {"use_cache": False},
    # Its contrastive heads read two fields its config class does not declare (checkpoints set them), and
    # compare text, image and cross-modal states: one width for all (the vision tower's 64, see OVERRIDES).
    "BridgeTowerForContrastiveLearning": {
        "contrastive_hidden_size": 16,
        "logit_scale_init_value": 2.6592,
        "hidden_size": 64,
        "text_config.hidden_size": 64,
    },
    # Built by UVDoc's backbone with the backbone's config, though its class names the whole model's: the
    # bridge stages (channels, dilation) that config would give it, two of them.
    "UVDocBridge": {"stage_configs": [[[128, 1]], [[128, 2], [128, 3]]]},
    # Read (as the vision tower's merge size) for its rotary indices, absent from its config.
    "Qwen3OmniMoeTalkerForConditionalGeneration": {"spatial_merge_size": 2},
}

# Class name -> the sub-config it is built from: stacks whose `config_class` names the composite config although
# the composite builds them from one of its parts (`T5GemmaEncoder(config.encoder)`).
CLASS_SUBCONFIGS: dict[str, str] = {"T5GemmaEncoder": "encoder", "T5GemmaDecoder": "decoder"}
# Class name -> the prefix of the fields that replace the unprefixed ones for it, as its composite does when
# building it (`t2u_decoder_layers` -> `decoder_layers`).
CLASS_PREFIXES: dict[str, str] = {"SeamlessM4Tv2TextToUnitDecoder": "t2u_"}


# The "layers" level keeps widths, so it is only tried on configs no wider than this.
MAX_FALLBACK_WIDTH = 4096  # e.g. hidden 1024 with a 4x MLP
WIDTH_FIELDS = ("hidden_size", "d_model", "n_embd", "embed_dim", "intermediate_size", "d_ff", "ffn_dim")


def _widest(config: Any) -> int:
    values = config.to_dict()
    widths = [v for k, v in values.items() if k in WIDTH_FIELDS and isinstance(v, int)]
    for name in getattr(config, "sub_configs", {}) or {}:
        sub = getattr(config, name, None)
        if sub is not None and hasattr(sub, "to_dict"):
            widths.append(_widest(sub))
    return max(widths, default=0)


def _mrope_default(model_cls: type) -> list[int] | None:
    """The rotary sections the class's modeling code splits by when the config names none."""
    import re
    import sys

    module = sys.modules.get(model_cls.__module__)
    try:
        source = inspect.getsource(module) if module is not None else ""
    except (OSError, TypeError):
        return None
    if "split(self.mrope_section" not in source and "inv_freq_3d" not in source:  # split or 3-D (ERNIE) sections
        return None
    found = re.search(r'get\("mrope_section", \[([0-9, ]+)\]\)', source)
    return [int(x) for x in found.group(1).split(",")] if found else None


def tiny_config(model_cls: type, level: str = "small") -> Any:
    """A small config for `model_cls` (its `config_class`, shrunk at `level`), eager attention everywhere."""
    config_cls = model_cls.config_class
    if config_cls is None:
        raise TypeError(f"{model_cls.__name__} has no config_class")
    default = config_cls()
    if level == "layers" and _widest(default) > MAX_FALLBACK_WIDTH:
        raise ValueError(f"too wide to build with only its layer counts lowered (width {_widest(default)})")
    config = _shrunk(default, level, _mrope_default(model_cls))
    if model_cls.__name__ in CLASS_SUBCONFIGS:
        config = getattr(config, CLASS_SUBCONFIGS[model_cls.__name__])
    if model_cls.__name__ in CLASS_PREFIXES:
        prefix = CLASS_PREFIXES[model_cls.__name__]
        for key, value in config.to_dict().items():
            if key.startswith(prefix):
                setattr(config, key[len(prefix) :], value)
    _post_overrides(config)
    for key, value in CLASS_OVERRIDES.get(model_cls.__name__, {}).items():
        _set_path(config, key, value)
    _set_eager(config)
    return copy.deepcopy(config)
