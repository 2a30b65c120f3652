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

from . import _inputs

__all__ = ["CLASS_INPUTS", "FAMILIES_SINCE"]

# Families the hooks name that only newer transformers releases have: family -> the first release with it.
FAMILIES_SINCE: dict[str, str] = {"omniasr": "5.24.0"}

Generic = Callable[[], dict[str, Any]]
Hook = Callable[[Any, Generic], dict[str, Any]]  # (model, the generic inputs) -> its inputs


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
    inputs["pixel_position_ids"] = positions.expand(_inputs.BATCH, -1, -1).contiguous()
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
    grid = torch.tensor([[1, 2, 2]] * _inputs.BATCH)
    tokens = int(grid.prod(-1).sum())
    pixels = torch.rand(tokens, patch * merge, patch * merge, channels, generator=_inputs._generator(11)) * 2 - 1
    return {"pixel_values": pixels, "image_grid_thw": grid}


def _mel_as_channels(model: Any, generic: Generic) -> dict[str, Any]:
    """Gemma 4's audio tower: its input projection assumes as many mel bins as the first subsampling
    convolution has channels (128 in the checkpoint); 64 frames."""
    mel = model.config.subsampling_conv_channels[0]
    inputs = generic()
    inputs["input_features"] = torch.randn(_inputs.BATCH, 64, mel, generator=_inputs._generator(4))
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
    pixels = torch.randn(_inputs.BATCH, config.num_channels, size, size, generator=_inputs._generator(3))
    patches = (size // config.patch_size) ** 2
    tokens = 1 + config.num_register_tokens + patches
    hidden = torch.randn(_inputs.BATCH, tokens, config.hidden_size, generator=_inputs._generator(7))
    with torch.no_grad():
        position_embeddings = rope(pixels)
    return {"hidden_states": hidden, "position_embeddings": position_embeddings}


def _inkling_pixels(model: Any, generic: Generic) -> dict[str, Any]:
    """Inkling's vision MLP: (patches, temporal patch, patch, patch, channels) pixel blocks."""
    config = model.config
    shape = (_inputs.BATCH * 4, config.temporal_patch_size, config.patch_size, config.patch_size, config.num_channels)
    return {"pixel_values": torch.randn(*shape, generator=_inputs._generator(3))}


def _inkling_audio(model: Any, generic: Generic) -> dict[str, Any]:
    """Inkling's audio embedder: (audios, frames, mel bins) quantised mel values, below `mel_vocab_size`."""
    config = model.config
    shape = (_inputs.BATCH, 8, config.n_mel_bins)
    codes = torch.randint(0, config.mel_vocab_size, shape, generator=_inputs._generator(5))
    return {"audio_input_ids": codes}


def _pooled_patches(model: Any, generic: Generic) -> dict[str, Any]:
    """Molmo2's adapter: two crops' 4 x 4 patch features (its feature layers concatenated) and, per
    output token, the flat indices of the 2 x 2 patches it pools; the last token has one padding slot
    (-1), as the processor pads."""
    config = model.config
    crops, side = 2, 4
    width = config.hidden_size * len(config.vision_feature_layer)
    features = torch.randn(crops, side * side, width, generator=_inputs._generator(18))
    corners = torch.tensor([[0, 1, side, side + 1]])
    starts = torch.tensor([c * side * side + r * side + col for c in range(crops) for r in (0, 2) for col in (0, 2)])
    indices = starts[:, None] + corners
    indices[-1, -1] = -1
    return {"image_features": features, "pooled_patches_idx": indices}


def _draft_block(model: Any, generic: Generic) -> dict[str, Any]:
    """MuseGlimmer's block-diffusion drafter: one block of noise embeddings to denoise, and the target
    model's hidden states of five accepted tokens (its `target_layer_ids` layers concatenated)."""
    config = model.config
    noise = torch.randn(_inputs.BATCH, config.block_size, config.hidden_size, generator=_inputs._generator(19))
    width = config.hidden_size * len(config.target_layer_ids)
    context = torch.randn(_inputs.BATCH, 5, width, generator=_inputs._generator(20))
    return {"noise_embeds": noise, "context_hidden_states": context}


# Builders that need only the model (they call the generic builders themselves when they extend them).
def _generic(model: Any) -> dict[str, Any]:
    return _inputs.generic_inputs(model)


def _embeddings(model: Any) -> dict[str, Any]:
    """`inputs_embeds` instead of ids: forwards that refuse `input_ids` (Qwen3-Omni's talker and
    code-to-wave stacks take the thinker's hidden states)."""
    inputs = {"inputs_embeds": _inputs.inputs_embeds(model.config)}
    if "use_cache" in _inputs.forward_parameters(model):
        inputs["use_cache"] = False
    return inputs


def _encoder_states(model: Any) -> torch.Tensor:
    """(batch, 5, width) encoder states, the width being the encoder's where the config names it."""
    config = model.config
    encoder = getattr(config, "encoder_config", None)
    width = (
        getattr(config, "cross_attention_hidden_size", None)
        or getattr(config, "cross_hidden_size", None)
        or _inputs._width(encoder or config)
    )
    return torch.randn(_inputs.BATCH, 5, width, generator=_inputs._generator(14))


def _with_encoder_states(model: Any) -> dict[str, Any]:
    """A decoder that refuses to run without encoder states (T5Gemma, Moonshine Streaming, Cohere ASR):
    the generic ids plus encoder states."""
    return _generic(model) | {"encoder_hidden_states": _encoder_states(model)}


def _text_to_unit(model: Any) -> dict[str, Any]:
    """SeamlessM4T v2's text-to-unit decoder: encoder states (batch, 5, width), two characters per
    encoder position and the (batch, 10) character ids they spell."""
    config = model.config
    states = torch.randn(_inputs.BATCH, 5, _inputs._width(config), generator=_inputs._generator(14))
    return {
        "char_input_ids": _inputs.token_ids(config, length=10, seed=15),
        "char_count_per_id": torch.full((_inputs.BATCH, 5), 2),
        "encoder_hidden_states": states,
    }


def _with_question_token(model: Any) -> dict[str, Any]:
    """Splinter's pre-training head: every row holds a question token (at position 1), whose
    representations it scores spans from."""
    inputs = _generic(model)
    inputs["input_ids"][:, 1] = model.config.question_token_id
    return inputs


def _with_time_condition(model: Any) -> dict[str, Any]:
    """Voxtral Realtime's text model: its layers scale by a time condition (the delay's embedding, one
    (1, 1, width) vector for the batch) that the composite computes and passes through its kwargs."""
    t_cond = torch.randn(1, 1, _inputs._width(model.config), generator=_inputs._generator(16))
    return _generic(model) | {"t_cond": t_cond}


def _mel_bins(config: Any) -> int:
    return getattr(config, "num_mel_bins", None) or config.feature_size


def _with_frame_mask(model: Any) -> dict[str, Any]:
    """An audio encoder that reads how many spectrogram frames are valid (`input_features_mask`,
    all valid), whichever axis of the generic spectrogram holds the frames."""
    inputs = _generic(model)
    features = inputs["input_features"]
    frames = features.shape[-1] if features.shape[1] == _mel_bins(model.config) else features.shape[1]
    return inputs | {"input_features_mask": torch.ones(_inputs.BATCH, frames, dtype=torch.long)}


def _stacked_frames(model: Any) -> dict[str, Any]:
    """Fun-ASR-Nano's encoder: (batch, frames, mel * stacked frames) low-frame-rate features, all valid."""
    config, frames = model.config, 16
    features = torch.randn(_inputs.BATCH, frames, config.input_size, generator=_inputs._generator(4))
    return {"input_features": features, "input_features_mask": torch.ones(_inputs.BATCH, frames, dtype=torch.long)}


def _four_stacked_frames(model: Any) -> dict[str, Any]:
    """Granite Speech 5's encoder (alone or under its CTC head): (batch, frames, 4 * mel), four
    spectrogram frames stacked per step."""
    config = getattr(model.config, "encoder_config", None) or model.config
    features = torch.randn(_inputs.BATCH, 32, 4 * config.num_mel_bins, generator=_inputs._generator(4))
    return {"input_features": features}


def _chunked_spectrogram(model: Any) -> dict[str, Any]:
    """Qwen3-ASR's encoder: (batch, mel, frames) cut into windows of `2 * n_window` frames (one
    window), all valid."""
    config = model.config
    frames = 2 * config.n_window
    features = torch.randn(_inputs.BATCH, _mel_bins(config), frames, generator=_inputs._generator(4))
    return {"input_features": features, "input_features_mask": torch.ones(_inputs.BATCH, frames, dtype=torch.long)}


def _audio_chunks(model: Any) -> dict[str, Any]:
    """dots3 note's audio tower: (chunks, mel, frames) and each chunk's length in waveform samples
    (one hop per frame, the second chunk a quarter shorter, so its padding is masked)."""
    config, frames = model.config, 64
    features = torch.randn(_inputs.BATCH, config.feature_size, frames, generator=_inputs._generator(4))
    lengths = torch.tensor([frames * config.hop_length, (frames - 16) * config.hop_length])
    return {"input_features": features, "chunk_sample_lengths": lengths}


def _gemma3n_audio(model: Any) -> dict[str, Any]:
    """Gemma 3n's audio encoder: (batch, frames, mel) and its padding mask (True where padded: none)."""
    config, frames = model.config, 64
    mel = torch.randn(_inputs.BATCH, frames, config.input_feat_size, generator=_inputs._generator(4))
    return {"audio_mel": mel, "audio_mel_mask": torch.zeros(_inputs.BATCH, frames, dtype=torch.bool)}


def _codec_with_semantics(model: Any) -> dict[str, Any]:
    """X-Codec 2 / NeuCodec: a (batch, 1, samples) waveform for the acoustic encoder and, for the
    semantic encoder (Wav2Vec2-BERT), its stacked features at the same frame rate (one frame per
    `prod(downsampling_ratios)` samples)."""
    config, frames = model.config, 10
    hop = 1
    for ratio in config.downsampling_ratios:
        hop *= ratio
    width = config.semantic_model_config.feature_projection_input_dim
    return {
        "input_values": torch.randn(_inputs.BATCH, 1, frames * hop, generator=_inputs._generator(5)),
        "input_features": torch.randn(_inputs.BATCH, frames, width, generator=_inputs._generator(4)),
    }


def _mono_waveform(model: Any) -> dict[str, Any]:
    """PE Audio: a (batch, 1, samples) waveform of 8 frames of its DAC embedder (`hop_length` samples
    each), and for its text-audio models the text ids too."""
    config = model.config
    dac = getattr(config, "dac_config", None) or config.audio_config.dac_config
    inputs = {"input_values": _inputs.input_values(config, length=8 * dac.hop_length).unsqueeze(1)}
    if "input_ids" in _inputs.forward_parameters(model):
        inputs["input_ids"] = _inputs.token_ids(model.config)
    return inputs


def _one_channel(model: Any) -> dict[str, Any]:
    """Omni-ASR's audio tower: a (batch, 1, samples) waveform (its first convolution has one input channel)."""
    return {"input_values": _inputs.input_values(model.config).unsqueeze(1)}


def _codebook_ids(model: Any) -> dict[str, Any]:
    """Models that embed one id per codebook at each step (Kyutai speech-to-text, CSM's backbone, Dia's
    decoder): (batch, seq, codebooks) ids, as many codebooks as their embedding's offsets."""
    offsets = next(buffer for name, buffer in model.named_buffers() if name.endswith(("tokens_offsets", "offsets")))
    columns = [_inputs.token_ids(model.config, seed=1 + i) for i in range(len(offsets))]
    inputs = _generic(model)
    inputs["input_ids"] = torch.stack(columns, dim=-1)
    return inputs


def _depth_decoder(model: Any) -> dict[str, Any]:
    """Moshi's depth decoder: a text id then one id per codebook (each position its own codebook), and
    the main decoder's last hidden state at each position (`input_size` wide)."""
    config, length = model.config, model.config.num_codebooks
    states = torch.randn(_inputs.BATCH, length, config.input_size, generator=_inputs._generator(14))
    return {"input_ids": _inputs.token_ids(config, length=length), "last_hidden_state": states}


def _moshi(model: Any) -> dict[str, Any]:
    """Moshi: text ids plus its own and the user's audio codes, (batch, codebooks, seq) each."""
    config, codebooks = model.config, model.config.num_codebooks

    def codes(seed: int) -> torch.Tensor:
        return torch.stack([_inputs.token_ids(config, seed=seed + i) for i in range(codebooks)], dim=1)

    return _generic(model) | {"moshi_audio_codes": codes(20), "user_audio_codes": codes(40)}


def _text_and_speech(model: Any) -> dict[str, Any]:
    """CLVP: text ids plus the (batch, mel, frames) spectrogram its conditioning encoder reads."""
    mel = model.config.decoder_config.feature_size
    return _generic(model) | {"input_features": _inputs.spectrogram(model, mel)}


def _autoformer_decoder(model: Any) -> dict[str, Any]:
    """Autoformer's decoder: the generic embedded series plus the trend it accumulates (same shape) and
    the encoder's states over the context window."""
    config, inputs = model.config, _generic(model)
    states = torch.randn(_inputs.BATCH, config.context_length, config.d_model, generator=_inputs._generator(14))
    trend = torch.randn(inputs["inputs_embeds"].shape, generator=_inputs._generator(18))
    return inputs | {"trend": trend, "encoder_hidden_states": states}


def _model_only(builders: dict[str, Callable[[Any], dict[str, Any]]]) -> dict[str, Hook]:
    """Hooks from builders that take only the model."""
    return {name: (lambda model, generic, build=build: build(model)) for name, build in builders.items()}


CLASS_INPUTS: dict[str, Hook] = {
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
    **_model_only(
        {
            **dict.fromkeys(
                (
                    "qwen3_omni_moe.Qwen3OmniMoeCode2WavTransformerModel",
                    "qwen3_omni_moe.Qwen3OmniMoeTalkerCodePredictorModel",
                    "qwen3_omni_moe.Qwen3OmniMoeTalkerCodePredictorModelForConditionalGeneration",
                    "qwen3_omni_moe.Qwen3OmniMoeTalkerModel",
                    "qwen3_omni_moe.Qwen3OmniMoeTalkerForConditionalGeneration",
                ),
                _embeddings,
            ),
            **dict.fromkeys(
                (
                    "t5gemma.T5GemmaDecoder",
                    "t5gemma2.T5Gemma2Decoder",
                    "moonshine_streaming.MoonshineStreamingDecoder",
                    "cohere_asr.CohereAsrDecoder",
                ),
                _with_encoder_states,
            ),
            "seamless_m4t_v2.SeamlessM4Tv2TextToUnitDecoder": _text_to_unit,
            "splinter.SplinterForPreTraining": _with_question_token,
            "voxtral_realtime.VoxtralRealtimeTextModel": _with_time_condition,
            "audioflamingo3.AudioFlamingo3Encoder": _with_frame_mask,
            "fun_asr_nano.FunAsrNanoEncoder": _stacked_frames,
            "qwen3_asr.Qwen3ASREncoder": _chunked_spectrogram,
            **dict.fromkeys(
                ("granite_speech5.GraniteSpeech5Encoder", "granite_speech5.GraniteSpeech5ForCTC"), _four_stacked_frames
            ),
            "dots3_note.Dots3NoteAudioModel": _audio_chunks,
            "gemma3n.Gemma3nAudioEncoder": _gemma3n_audio,
            **dict.fromkeys(("xcodec2.Xcodec2Model", "neucodec.NeuCodecModel"), _codec_with_semantics),
            **dict.fromkeys(
                ("pe_audio.PeAudioEncoder", "pe_audio.PeAudioModel", "pe_audio.PeAudioFrameLevelModel"), _mono_waveform
            ),
            "omniasr.OmniASRAudioModel": _one_channel,
            "moshi.MoshiDepthDecoder": _depth_decoder,
            "autoformer.AutoformerDecoder": _autoformer_decoder,
            "clvp.ClvpModelForConditionalGeneration": _text_and_speech,
            "moshi.MoshiForConditionalGeneration": _moshi,
            "dia.DiaDecoder": lambda model: _codebook_ids(model) | {"encoder_hidden_states": _encoder_states(model)},
            **dict.fromkeys(
                (
                    "kyutai_speech_to_text.KyutaiSpeechToTextModel",
                    "kyutai_speech_to_text.KyutaiSpeechToTextForConditionalGeneration",
                    "csm.CsmBackboneModel",
                ),
                _codebook_ids,
            ),
        }
    ),
}
