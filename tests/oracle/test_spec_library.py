"""Every shipped spec (yamltrace/specs/*.yaml) verified on a tiny random model of its family.

For each family, a base model and one head class, built in-process from a tiny config with eager
attention (nothing is downloaded): transformers' own keys equal the model's outputs (`torch.equal`);
every other key captures one tensor per layer, of one shape; the residual identities hold (pre-norm,
post-norm or parallel, as the spec's header says); every recorder matches at least one module. A
spec file without an entry in `FAMILIES` fails `test_every_shipped_spec_is_verified`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
import transformers as tf
from torch import nn

import yamltrace.specs
from yamltrace import load_spec
from yamltrace.engine import normalize_output_map, plan_hooks
from yamltrace.tracing import trace

VOCAB, BATCH, SEQ, HIDDEN = 99, 2, 7, 32
TOKEN_IDS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)
DECODER = dict(
    vocab_size=VOCAB,
    hidden_size=HIDDEN,
    intermediate_size=40,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    **TOKEN_IDS,
)
# Model outputs that are transformers' own captures (compared with torch.equal).
OWN_KEYS = ("hidden_states", "attentions", "cross_attentions", "router_logits")


def _ids(seed: int = 1) -> torch.Tensor:
    return torch.randint(3, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(seed))


def tokens() -> dict[str, Any]:
    return {"input_ids": _ids()}


def seq2seq() -> dict[str, Any]:
    return {"input_ids": _ids(), "decoder_input_ids": _ids(2)[:, :5]}


def pixels() -> dict[str, Any]:
    return {"pixel_values": torch.randn(BATCH, 3, 16, 16, generator=torch.Generator().manual_seed(3))}


def audio() -> dict[str, Any]:
    features = torch.randn(BATCH, 8, 32, generator=torch.Generator().manual_seed(4))
    return {"input_features": features, "decoder_input_ids": _ids(2)[:, :5]}


def gpt2_inputs() -> dict[str, Any]:
    return {**tokens(), "encoder_hidden_states": torch.randn(BATCH, 5, HIDDEN, generator=torch.Generator().manual_seed(2))}


@dataclass(frozen=True)
class Family:
    """How to build a tiny model of a family and what its spec promises.

    `identity`: which residual identities hold ("pre": resid_mid == h + attention_outputs and
    h' == resid_mid + mlp_outputs; "pre-mlp": only the second (cross-attention sits between);
    "parallel": h' == h + attention_outputs + mlp_outputs; "post" and "post-mlp": the same sums
    through the layer's norms). `part`: the submodule traced (a stack of an encoder-decoder), whose
    own keys are the model output's fields with `prefix`. `flat`: the layer flattens its MLP's
    input to [batch*seq, hidden]. `head_config`: a config for the head class when it differs.
    """

    config: Callable[[], Any]
    base: Any
    head: Any
    inputs: Callable[[], dict[str, Any]]
    identity: str = "pre"
    part: str | None = None
    prefix: str = ""
    flat: bool = False
    flags: dict[str, Any] = field(default_factory=dict)
    head_config: Callable[[], Any] | None = None


def cfg(cls: type, **kwargs: Any) -> Callable[[], Any]:
    def build() -> Any:
        config = cls(**kwargs)
        config._attn_implementation = "eager"
        return config

    return build


ENC_DEC = dict(
    vocab_size=VOCAB,
    d_model=HIDDEN,
    encoder_ffn_dim=37,
    decoder_ffn_dim=37,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    decoder_start_token_id=1,
    **TOKEN_IDS,
)
CLIP_TEXT = dict(
    vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4, **TOKEN_IDS
)
VISION = dict(hidden_size=HIDDEN, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4, image_size=16, patch_size=8)
MOE = dict(output_router_logits=True)

FAMILIES: dict[str, Family] = {
    "llama": Family(cfg(tf.LlamaConfig, **DECODER), tf.LlamaModel, tf.LlamaForCausalLM, tokens),
    "mistral": Family(cfg(tf.MistralConfig, **DECODER), tf.MistralModel, tf.MistralForCausalLM, tokens),
    "qwen2": Family(cfg(tf.Qwen2Config, **DECODER), tf.Qwen2Model, tf.Qwen2ForCausalLM, tokens),
    "qwen3": Family(cfg(tf.Qwen3Config, **DECODER, head_dim=8), tf.Qwen3Model, tf.Qwen3ForCausalLM, tokens),
    "gemma": Family(cfg(tf.GemmaConfig, **DECODER, head_dim=8), tf.GemmaModel, tf.GemmaForCausalLM, tokens),
    "gemma2": Family(cfg(tf.Gemma2Config, **DECODER, head_dim=8), tf.Gemma2Model, tf.Gemma2ForCausalLM, tokens),
    "gemma3": Family(cfg(tf.Gemma3TextConfig, **DECODER, head_dim=8), tf.Gemma3TextModel, tf.Gemma3ForCausalLM, tokens),
    "phi3": Family(cfg(tf.Phi3Config, **DECODER), tf.Phi3Model, tf.Phi3ForCausalLM, tokens),
    "mixtral": Family(
        cfg(tf.MixtralConfig, **DECODER, num_local_experts=4), tf.MixtralModel, tf.MixtralForCausalLM, tokens, flags=MOE
    ),
    "qwen2_moe": Family(
        cfg(tf.Qwen2MoeConfig, **DECODER, num_experts=4, moe_intermediate_size=16, shared_expert_intermediate_size=16),
        tf.Qwen2MoeModel,
        tf.Qwen2MoeForCausalLM,
        tokens,
        flags=MOE,
    ),
    "deepseek_v3": Family(
        cfg(
            tf.DeepseekV3Config,
            **{**DECODER, "num_key_value_heads": 4},
            n_routed_experts=4,
            moe_intermediate_size=16,
            first_k_dense_replace=1,
            num_experts_per_tok=2,
            n_group=1,
            topk_group=1,
            q_lora_rank=16,
            kv_lora_rank=16,
            qk_rope_head_dim=4,
            qk_nope_head_dim=4,
            v_head_dim=8,
        ),
        tf.DeepseekV3Model,
        tf.DeepseekV3ForCausalLM,
        tokens,
        flags=MOE,
    ),
    "gpt2": Family(
        cfg(
            tf.GPT2Config,
            vocab_size=VOCAB,
            n_embd=HIDDEN,
            n_layer=2,
            n_head=4,
            n_positions=64,
            add_cross_attention=True,
            **TOKEN_IDS,
        ),
        tf.GPT2Model,
        tf.GPT2LMHeadModel,
        gpt2_inputs,
        identity="pre-mlp",
    ),
    "gpt_neox": Family(
        cfg(
            tf.GPTNeoXConfig,
            vocab_size=VOCAB,
            hidden_size=HIDDEN,
            intermediate_size=37,
            num_hidden_layers=2,
            num_attention_heads=4,
            **TOKEN_IDS,
        ),
        tf.GPTNeoXModel,
        tf.GPTNeoXForCausalLM,
        tokens,
        identity="parallel",
    ),
    "opt": Family(
        cfg(
            tf.OPTConfig,
            vocab_size=VOCAB,
            hidden_size=HIDDEN,
            ffn_dim=37,
            num_hidden_layers=2,
            num_attention_heads=4,
            word_embed_proj_dim=HIDDEN,
            **TOKEN_IDS,
        ),
        tf.OPTModel,
        tf.OPTForCausalLM,
        tokens,
        flat=True,
    ),
    "bert": Family(
        cfg(
            tf.BertConfig,
            vocab_size=VOCAB,
            hidden_size=HIDDEN,
            intermediate_size=37,
            num_hidden_layers=2,
            num_attention_heads=4,
            pad_token_id=0,
        ),
        tf.BertModel,
        tf.BertForMaskedLM,
        tokens,
        identity="post",
    ),
    "roberta": Family(
        cfg(
            tf.RobertaConfig,
            vocab_size=VOCAB,
            hidden_size=HIDDEN,
            intermediate_size=37,
            num_hidden_layers=2,
            num_attention_heads=4,
            max_position_embeddings=32,
            **TOKEN_IDS,
        ),
        tf.RobertaModel,
        tf.RobertaForMaskedLM,
        tokens,
        identity="post",
    ),
    **{
        f"t5_{side}": Family(
            cfg(
                tf.T5Config,
                vocab_size=VOCAB,
                d_model=HIDDEN,
                d_ff=37,
                num_layers=2,
                num_heads=4,
                d_kv=8,
                decoder_start_token_id=1,
                **TOKEN_IDS,
            ),
            tf.T5Model,
            tf.T5ForConditionalGeneration,
            seq2seq,
            identity="pre" if side == "encoder" else "pre-mlp",
            part=side,
            prefix=f"{side}_",
        )
        for side in ("encoder", "decoder")
    },
    **{
        f"bart_{side}": Family(
            cfg(tf.BartConfig, **ENC_DEC),
            tf.BartModel,
            tf.BartForConditionalGeneration,
            seq2seq,
            identity="post" if side == "encoder" else "post-mlp",
            part=side,
            prefix=f"{side}_",
        )
        for side in ("encoder", "decoder")
    },
    **{
        f"whisper_{side}": Family(
            cfg(tf.WhisperConfig, **ENC_DEC, num_mel_bins=8, max_source_positions=16, max_target_positions=16),
            tf.WhisperModel,
            tf.WhisperForConditionalGeneration,
            audio,
            identity="pre" if side == "encoder" else "pre-mlp",
            part=side,
            prefix=f"{side}_",
        )
        for side in ("encoder", "decoder")
    },
    "vit": Family(cfg(tf.ViTConfig, **VISION), tf.ViTModel, tf.ViTForImageClassification, pixels),
    "clip_text": Family(cfg(tf.CLIPTextConfig, **CLIP_TEXT), tf.CLIPTextModel, tf.CLIPTextModelWithProjection, tokens),
    "clip_vision": Family(cfg(tf.CLIPVisionConfig, **VISION), tf.CLIPVisionModel, tf.CLIPVisionModelWithProjection, pixels),
    "siglip_text": Family(cfg(tf.SiglipTextConfig, **CLIP_TEXT), tf.SiglipTextModel, tf.SiglipTextModel, tokens),
    "siglip_vision": Family(
        cfg(tf.SiglipVisionConfig, **VISION),
        tf.SiglipVisionModel,
        tf.SiglipForImageClassification,
        pixels,
        head_config=cfg(tf.SiglipConfig, vision_config=VISION, text_config=CLIP_TEXT),
    ),
}


# The shipped specs this file verifies: those whose header names it (the specs of timm, torchvision and
# diffusers models name tests/vision/test_vision_specs.py, run in the vision environment).
VERIFIED_HERE = [name for name in yamltrace.specs.list() if "(tests/oracle/test_spec_library.py)" in yamltrace.specs.header(name)]


def test_every_shipped_spec_is_verified() -> None:
    assert sorted(FAMILIES) == VERIFIED_HERE
    assert len(FAMILIES) >= 20


def verified_versions(header: str) -> list[str]:
    """The transformers versions a spec header says the spec was verified with."""
    found = re.search(r"Verified with: transformers ([0-9][0-9., ]*[0-9])", header)
    return [v.strip() for v in found.group(1).split(",")] if found else []


def test_verified_versions_are_read_from_the_header() -> None:
    header = "yamltrace spec library: x Verified with: transformers 5.23.0, 5.24.0 (tests/oracle/test_spec_library.py)"
    assert verified_versions(header) == ["5.23.0", "5.24.0"]
    assert verified_versions("Verified with: transformers 5.23.0 (tests)") == ["5.23.0"]
    assert verified_versions("no such line") == []


@pytest.mark.parametrize("name", VERIFIED_HERE)
def test_header_names_the_verified_version_and_classes(name: str) -> None:
    header = yamltrace.specs.header(name)
    versions = verified_versions(header)
    assert tf.__version__ in versions, (
        f"yamltrace/specs/{name}.yaml was verified with transformers {', '.join(versions) or '(none named)'}, "
        f"not the installed {tf.__version__}: run this file under {tf.__version__} and, once it passes, add the "
        f"version to the header's 'Verified with:' line (CONTRIBUTING.md, adding a transformers release)"
    )
    family = FAMILIES[name]
    for cls in {family.base, family.head}:
        assert cls.__name__ in header


@functools.cache
def traced(name: str, which: str) -> tuple[nn.Module, Any, Any, Any]:
    """(the traced module, the model's own output, the spec's captures, the spec) for the family's
    base or head class."""
    family = FAMILIES[name]
    torch.manual_seed(0)
    config = family.head_config() if which == "head" and family.head_config else family.config()
    model = (family.base if which == "base" else family.head)(config).eval()
    traced_part = getattr(model, f"get_{family.part}")() if family.part else model
    spec = load_spec(f"builtin:{name}")
    with torch.no_grad(), trace(traced_part, spec) as captures:
        output = model(**family.inputs(), output_hidden_states=True, output_attentions=True, **family.flags)
    return traced_part, output, captures, spec


CASES = [(name, which) for name in sorted(FAMILIES) for which in ("base", "head")]


@pytest.mark.parametrize(("name", "which"), CASES)
def test_every_recorder_matches_a_module(name: str, which: str) -> None:
    model, _, _, spec = traced(name, which)
    for key, recorders in spec.outputs.items():
        for recorder in recorders:
            assert plan_hooks(model, normalize_output_map({key: recorder}), nested_maps=False), (key, recorder)
    assert not spec.patches


@pytest.mark.parametrize(("name", "which"), CASES)
def test_own_keys_equal_the_model_outputs(name: str, which: str) -> None:
    _, output, captures, spec = traced(name, which)
    prefix = FAMILIES[name].prefix
    compared = []
    for key in OWN_KEYS:
        expected = getattr(output, key if key == "cross_attentions" else prefix + key, None)
        if key not in spec.outputs or expected is None:
            continue
        captured = captures[key]
        assert len(captured) == len(expected), key
        for i, (a, b) in enumerate(zip(captured, expected)):
            assert torch.equal(a, b), f"{key}[{i}]"
        compared.append(key)
    assert "hidden_states" in compared and "attentions" in compared


def layer_count(module: nn.Module, captures: Any) -> int:
    """The number of layers: hidden_states holds one more (the initial state)."""
    return len(captures["hidden_states"]) - 1


@pytest.mark.parametrize(("name", "which"), CASES)
def test_extra_keys_capture_one_tensor_per_layer(name: str, which: str) -> None:
    module, _, captures, spec = traced(name, which)
    family = FAMILIES[name]
    layers = layer_count(module, captures)
    residual = captures["hidden_states"][0].shape
    assert layers == 2
    for key in spec.outputs:
        if key in OWN_KEYS:
            continue
        values = captures[key]
        expected = 1 if key in ("embeddings", "final_norm") else layers
        assert len(values) == expected, (key, len(values), expected)
        stacked = captures.stack(key)  # one shape for all layers
        flat = family.flat and key in ("resid_mid", "mlp_outputs", "mlp_activations")
        assert stacked.shape[1] == (BATCH * residual[1] if flat else BATCH), (key, stacked.shape)
        if key in ("resid_mid", "attention_outputs", "mlp_outputs"):
            assert stacked.shape[1:] == ((BATCH * residual[1], HIDDEN) if flat else residual), (key, stacked.shape)
        else:
            assert stacked.shape[-1] >= 1, key


def close(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    torch.testing.assert_close(a, b.reshape(a.shape), rtol=1e-5, atol=1e-5, msg=lambda m: f"{what}: {m}")


@pytest.mark.parametrize(("name", "which"), CASES)
def test_residual_identities(name: str, which: str) -> None:
    module, _, captures, _ = traced(name, which)
    identity = FAMILIES[name].identity
    h, attn = captures["hidden_states"], captures["attention_outputs"]
    mid = captures["resid_mid"] if "resid_mid" in captures else None
    mlp = captures["mlp_outputs"] if "mlp_outputs" in captures else None
    layers = layer_count(module, captures)
    for i in range(layers - 1):  # the last state may be tied to the final norm
        if identity == "pre":
            close(mid[i], h[i] + attn[i], f"resid_mid[{i}]")
        if identity in ("pre", "pre-mlp"):
            close(h[i + 1], mid[i] + mlp[i].reshape(mid[i].shape), f"hidden_states[{i + 1}]")
        if identity == "parallel":
            close(h[i + 1], h[i] + attn[i] + mlp[i], f"hidden_states[{i + 1}]")
        if identity == "post":
            path = captures.paths("resid_mid")[i]
            norm = module.get_submodule(path + ".LayerNorm" if name in ("bert", "roberta") else path)
            close(mid[i], norm(h[i] + attn[i]), f"resid_mid[{i}] (post-norm)")
        if identity in ("post", "post-mlp") and mlp is not None:
            layer = captures.paths("hidden_states")[i + 1]
            close(
                h[i + 1],
                module.get_submodule(layer + ".final_layer_norm")(mid[i] + mlp[i]),
                f"hidden_states[{i + 1}] (post-norm)",
            )


# Each spec on every class its header applies it to, built from that class's default configuration
# shrunk to tiny sizes (the sweep's `tiny_config`) and fed the sweep's inputs, traced strictly: a
# recorder of modules that only some configurations have (GPT-2's cross-attention) must be optional.
TOWERS = {"text": "text_model", "vision": "vision_model"}


def applies_to(name: str) -> list[str]:
    """The transformers model classes a shipped spec's header says it applies to (composites named
    "(for CLIPModel, trace model.text_model)" included; parts such as `T5Stack` left out)."""
    found = re.search(r"Applies to: (.*?)\.(?: [A-Z]|$)", yamltrace.specs.header(name))
    assert found, f"yamltrace/specs/{name}.yaml: no 'Applies to:' line in its header"
    names = re.findall(r"\b[A-Z][A-Za-z0-9]+\b", found.group(1))
    classes = [n for n in names if isinstance(getattr(tf, n, None), type) and issubclass(getattr(tf, n), tf.PreTrainedModel)]
    return [n for n in dict.fromkeys(classes) if not re.search(rf"\b{n} as\b", found.group(1))]


def traced_module(name: str, model: nn.Module) -> nn.Module:
    """What the spec is traced on: the family's part (encoder, decoder), a composite's tower, or the model."""
    family = FAMILIES[name]
    if family.part:
        return getattr(model, f"get_{family.part}")()
    tower = TOWERS.get(name.rpartition("_")[2])
    return getattr(model, tower) if tower and type(model).__name__ in ("CLIPModel", "SiglipModel") else model


DEFAULT_CASES = [(name, cls) for name in VERIFIED_HERE for cls in applies_to(name)]


def test_every_header_names_the_classes_it_applies_to() -> None:
    assert {name for name, _ in DEFAULT_CASES} == set(VERIFIED_HERE)
    assert ("gpt2", "GPT2LMHeadModel") in DEFAULT_CASES and ("clip_text", "CLIPModel") in DEFAULT_CASES
    assert ("bart_decoder", "BartDecoder") not in DEFAULT_CASES  # a part, traced through its model


@pytest.mark.parametrize(("name", "cls_name"), DEFAULT_CASES)
def test_spec_traces_strictly_on_the_default_configuration(name: str, cls_name: str) -> None:
    from oracle.sweep._configs import tiny_config
    from oracle.sweep._inputs import build_inputs

    cls = getattr(tf, cls_name)
    torch.manual_seed(0)
    model = cls(tiny_config(cls)).eval()
    spec = load_spec(f"builtin:{name}")
    with torch.no_grad(), trace(traced_module(name, model), spec) as captures:  # strict: every recorder matches
        model(**build_inputs(model))
    optional = {key for key, recorders in spec.outputs.items() if all(r.optional for r in recorders)}
    empty = [key for key in spec.outputs if key not in optional and not captures.get(key)]
    assert not empty, f"builtin:{name} on {cls_name} (default configuration): no values for {empty}"
