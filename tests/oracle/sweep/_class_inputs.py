"""Inputs for classes whose forward needs more than `_inputs.build_inputs` derives from its signature.

Each entry names a class and builds its whole keyword input set, usually the generic one plus what the
forward reads but its signature does not make required (a decoder's encoder states), or in another form
(embeddings where ids are refused). Everything is drawn from fixed-seed generators, as in `_inputs`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from . import _inputs

__all__ = ["CLASS_INPUTS"]


def _generic(model: Any) -> dict[str, Any]:
    return _inputs.build_inputs(model, hooks=False)


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
        getattr(config, "cross_attention_hidden_size", None) or getattr(config, "cross_hidden_size", None)
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


CLASS_INPUTS: dict[str, Callable[[Any], dict[str, Any]]] = {
    **dict.fromkeys(
        (
            "Qwen3OmniMoeCode2WavTransformerModel", "Qwen3OmniMoeTalkerCodePredictorModel",
            "Qwen3OmniMoeTalkerCodePredictorModelForConditionalGeneration", "Qwen3OmniMoeTalkerModel",
            "Qwen3OmniMoeTalkerForConditionalGeneration",
        ),
        _embeddings,
    ),
    **dict.fromkeys(
        ("T5GemmaDecoder", "T5Gemma2Decoder", "MoonshineStreamingDecoder", "CohereAsrDecoder"), _with_encoder_states
    ),
    "SeamlessM4Tv2TextToUnitDecoder": _text_to_unit,
    "SplinterForPreTraining": _with_question_token,
    "VoxtralRealtimeTextModel": _with_time_condition,
    "AudioFlamingo3Encoder": _with_frame_mask,
    "FunAsrNanoEncoder": _stacked_frames,
    "Qwen3ASREncoder": _chunked_spectrogram,
    **dict.fromkeys(("GraniteSpeech5Encoder", "GraniteSpeech5ForCTC"), _four_stacked_frames),
    "Dots3NoteAudioModel": _audio_chunks,
    "Gemma3nAudioEncoder": _gemma3n_audio,
    **dict.fromkeys(("Xcodec2Model", "NeuCodecModel"), _codec_with_semantics),
    **dict.fromkeys(("PeAudioEncoder", "PeAudioModel", "PeAudioFrameLevelModel"), _mono_waveform),
    "MoshiDepthDecoder": _depth_decoder,
    "AutoformerDecoder": _autoformer_decoder,
    "ClvpModelForConditionalGeneration": _text_and_speech,
    "MoshiForConditionalGeneration": _moshi,
    "DiaDecoder": lambda model: _codebook_ids(model) | {"encoder_hidden_states": _encoder_states(model)},
    **dict.fromkeys(
        ("KyutaiSpeechToTextModel", "KyutaiSpeechToTextForConditionalGeneration", "CsmBackboneModel"), _codebook_ids
    ),
}
