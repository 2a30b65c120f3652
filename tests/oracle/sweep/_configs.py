"""Tiny configs for any transformers model class: generic shrinking plus per-family overrides.

Generic shrinking rebuilds the class's default config (and each of its sub-configs) with small sizes:
two layers, hidden size 32, four heads, few experts, 32-pixel images, short audio. Sizes are only
lowered, never raised. Fields derived from others (per-layer type lists) are dropped so the config
derives them again. The vocabulary stays large enough to hold every special token id the config
names, so multimodal placeholder tokens keep their meaning. Families where that is not enough get
explicit overrides in `OVERRIDES` (applied to the config, or to any sub-config, of that model type).
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["tiny_config", "LEVELS", "SIZES", "OVERRIDES"]

LAYERS = 2
HIDDEN = 32
HEADS = 4

# Field name -> the value it is lowered to (when the default is an int larger than it).
SIZES: dict[str, int] = {
    **dict.fromkeys(
        ("num_hidden_layers", "num_layers", "n_layer", "n_layers", "encoder_layers", "decoder_layers",
         "num_encoder_layers", "num_decoder_layers", "depth", "num_decoder_hidden_layers"),
        LAYERS,
    ),
    **dict.fromkeys(("hidden_size", "d_model", "n_embd", "embed_dim", "embedding_size", "hidden_dim"), HIDDEN),
    **dict.fromkeys(("intermediate_size", "encoder_ffn_dim", "decoder_ffn_dim", "ffn_dim", "d_ff", "mlp_dim"), 48),
    **dict.fromkeys(("moe_intermediate_size", "shared_expert_intermediate_size", "expert_intermediate_size"), 16),
    **dict.fromkeys(
        ("num_attention_heads", "n_head", "n_heads", "encoder_attention_heads", "decoder_attention_heads",
         "num_heads", "attention_heads"),
        HEADS,
    ),
    "num_key_value_heads": 2,
    "head_dim": HIDDEN // HEADS,
    "d_kv": HIDDEN // HEADS,
    **dict.fromkeys(("num_experts", "n_routed_experts", "num_local_experts"), 4),
    "num_experts_per_tok": 2,
    "kv_lora_rank": 16,
    "q_lora_rank": 16,
    "qk_nope_head_dim": 8,
    "qk_rope_head_dim": 8,
    "v_head_dim": 8,
    "projection_dim": 16,
    "projection_size": HIDDEN,
    "image_size": 32,
    "patch_size": 8,
    "max_source_positions": 16,
    "max_target_positions": 64,
    "n_positions": 64,
    "word_embed_proj_dim": HIDDEN,
}

# Fields recomputed from the others when absent.
DERIVED = (
    "layer_types", "mlp_layer_types", "transformers_version", "architectures", "_name_or_path", "out_features",
    "out_indices", "stage_names",
)
# The fields the "layers" level lowers (the fallback when shrinking every size fails).
LAYER_FIELDS = frozenset(name for name, value in SIZES.items() if value == LAYERS)
LEVELS = ("small", "layers")

# model_type -> fields set on every config (or sub-config) of that type, after shrinking.
OVERRIDES: dict[str, dict[str, Any]] = {
    "deepseek_v3": {"first_k_dense_replace": 1, "n_group": 2, "topk_group": 1},
    "t5": {"decoder_start_token_id": 0},  # what T5's checkpoints set; heads shift input_ids with it
}


def _special_token_ids(values: dict[str, Any]) -> list[int]:
    return [
        v for k, v in values.items()
        if k.endswith(("_token_id", "_token_index")) and isinstance(v, int) and not isinstance(v, bool)
    ]


def _shrunk(config: Any, level: str) -> Any:
    """A copy of `config` (a PreTrainedConfig) with small sizes; sub-configs shrunk the same way.

    `level` "small" lowers every field of SIZES; "layers" only the layer counts (widths stay)."""
    values = {k: v for k, v in config.to_dict().items() if k not in DERIVED}
    for key, value in list(values.items()):
        target = SIZES.get(key) if level == "small" or key in LAYER_FIELDS else None
        if target is not None and isinstance(value, int) and not isinstance(value, bool) and value > target:
            values[key] = target
    for name in getattr(config, "sub_configs", {}) or {}:
        sub = getattr(config, name, None)
        if sub is not None and hasattr(sub, "to_dict"):
            values[name] = _shrunk(sub, level)
    if level == "small" and isinstance(values.get("vocab_size"), int):
        values["vocab_size"] = max([99, *(i + 1 for i in _special_token_ids(values))])
    if values.get("kv_lora_rank") and isinstance(values.get("num_attention_heads"), int):
        values["num_key_value_heads"] = values["num_attention_heads"]  # multi-head latent attention: no groups
    if "pad_token_id" in values and values["pad_token_id"] is None:
        values["pad_token_id"] = 0  # sequence classification heads need one for batches > 1
    values.update(OVERRIDES.get(getattr(config, "model_type", None), {}))
    return type(config)(**values)


def _set_eager(config: Any) -> None:
    config._attn_implementation = "eager"
    for name in getattr(config, "sub_configs", {}) or {}:
        sub = getattr(config, name, None)
        if sub is not None and hasattr(sub, "to_dict"):
            _set_eager(sub)


# Class name -> fields set on its root config (classes used standalone in ways the default config does not allow).
CLASS_OVERRIDES: dict[str, dict[str, Any]] = {
    "T5Stack": {"use_cache": False},
}


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


def tiny_config(model_cls: type, level: str = "small") -> Any:
    """A small config for `model_cls` (its `config_class`, shrunk at `level`), eager attention everywhere."""
    config_cls = model_cls.config_class
    if config_cls is None:
        raise TypeError(f"{model_cls.__name__} has no config_class")
    default = config_cls()
    if level == "layers" and _widest(default) > MAX_FALLBACK_WIDTH:
        raise ValueError(f"too wide to build with only its layer counts lowered (width {_widest(default)})")
    config = _shrunk(default, level)
    for key, value in CLASS_OVERRIDES.get(model_cls.__name__, {}).items():
        setattr(config, key, value)
    _set_eager(config)
    return copy.deepcopy(config)
