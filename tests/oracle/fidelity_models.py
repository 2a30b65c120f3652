"""Tiny random transformers models of popular classes (eager attention, eval, fixed seed) with inputs.

`MODELS` maps a class name to (config overrides, input builder). `build(name)` makes the model; each
forward with `output_hidden_states=True, output_attentions=True` is the oracle `trace` must equal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import transformers
from torch import nn

VOCAB = 99
_SMALL = dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _ids() -> dict[str, torch.Tensor]:
    return {"input_ids": torch.randint(3, VOCAB, (2, 7), generator=_gen(1))}


def _seq2seq() -> dict[str, torch.Tensor]:
    return {**_ids(), "decoder_input_ids": torch.randint(3, VOCAB, (2, 5), generator=_gen(2))}


def _pixels() -> dict[str, torch.Tensor]:
    return {"pixel_values": torch.randn(2, 3, 30, 30, generator=_gen(3))}


def _clip() -> dict[str, torch.Tensor]:
    return {**_ids(), **_pixels()}


def _whisper() -> dict[str, torch.Tensor]:
    return {
        "input_features": torch.randn(2, 8, 20, generator=_gen(4)),
        "decoder_input_ids": torch.randint(3, VOCAB, (2, 5), generator=_gen(2)),
    }


_DECODER = dict(vocab_size=VOCAB, num_key_value_heads=2, max_position_embeddings=64, **_SMALL)
_BART = dict(
    vocab_size=VOCAB,
    d_model=32,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=37,
    decoder_ffn_dim=37,
    max_position_embeddings=64,
)
_VISION = dict(image_size=30, patch_size=10, **_SMALL)
_CLIP = dict(text_config=dict(vocab_size=VOCAB, max_position_embeddings=64, **_SMALL), vision_config=_VISION)

MODELS: dict[str, tuple[dict[str, Any], Callable[[], dict[str, torch.Tensor]]]] = {
    "LlamaModel": (_DECODER, _ids),
    "LlamaForCausalLM": (_DECODER, _ids),
    "LlamaForSequenceClassification": ({**_DECODER, "pad_token_id": 0}, _ids),
    "MistralForCausalLM": (_DECODER, _ids),
    "Qwen2ForCausalLM": (_DECODER, _ids),
    "GPT2LMHeadModel": (
        dict(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=1, eos_token_id=2),
        _ids,
    ),
    "BertForMaskedLM": (dict(vocab_size=VOCAB, **_SMALL), _ids),
    "BartModel": (_BART, _seq2seq),
    "BartForConditionalGeneration": (_BART, _seq2seq),
    "T5Model": (dict(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=4), _seq2seq),
    "WhisperModel": (
        dict(
            vocab_size=VOCAB,
            d_model=32,
            encoder_layers=2,
            decoder_layers=2,
            encoder_attention_heads=4,
            decoder_attention_heads=4,
            encoder_ffn_dim=37,
            decoder_ffn_dim=37,
            num_mel_bins=8,
            max_source_positions=10,
            max_target_positions=16,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
            decoder_start_token_id=1,
        ),
        _whisper,
    ),
    "CLIPModel": (_CLIP, _clip),
    "CLIPTextModelWithProjection": (dict(vocab_size=VOCAB, max_position_embeddings=64, **_SMALL), _ids),
    "GitModel": (dict(vocab_size=VOCAB, vision_config=_VISION, **_SMALL), _clip),
    "ViTMAEForPreTraining": (
        dict(
            decoder_hidden_size=32,
            decoder_intermediate_size=37,
            decoder_num_hidden_layers=2,
            decoder_num_attention_heads=4,
            **_VISION,
        ),
        _pixels,
    ),
}


def build(name: str) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """The tiny random model of class `name` (eager attention, eval mode, seed 0) and its inputs."""
    cls = getattr(transformers, name)
    overrides, inputs = MODELS[name]
    config = cls.config_class(**overrides, attn_implementation="eager")
    torch.manual_seed(0)
    return cls(config).eval(), inputs()


def expected_outputs(model: nn.Module, inputs: dict[str, torch.Tensor]) -> Any:
    """The model's own output with every capture flag on (the oracle)."""
    with torch.no_grad():
        torch.manual_seed(0)
        return model(**inputs, output_hidden_states=True, output_attentions=True)


def expected_captures(output: Any) -> dict[str, tuple]:
    """The tuples of tensors an output holds, by the name `trace` gives them: `hidden_states`,
    `encoder_attentions`, ...; a nested output field `<name>_output` contributes `<name>_<key>`."""
    found: dict[str, tuple] = {}
    for field, value in output.items():
        if isinstance(value, tuple) and value and all(v is None or isinstance(v, torch.Tensor) for v in value):
            if "hidden_states" in field or "attentions" in field:
                found[field] = value
        elif isinstance(value, transformers.utils.ModelOutput) and field.endswith("_output"):
            found.update({f"{field[: -len('_output')]}_{k}": v for k, v in expected_captures(value).items()})
    return found
