"""Capture scopes under `trace`: heads over decorated base models, nested decorated models, encoder-decoders,
and the checks that keep a capture from being silently empty (dead recorders, unapplied patches, no tensor)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from helpers import assert_same, hook_count
from helpers_scopes import EncoderDecoder, Head, Outer, build
from yamltrace.capture import capture_outputs
from yamltrace.engine import OutputRecorder
from yamltrace.errors import NeverRanWarning, SpecError
from yamltrace.examples.tiny import TinyAttention, TinyDecoderLayer, TinyModel
from yamltrace.patch import patch_model
from yamltrace.spec import PatchEntry, Spec, load_spec
from yamltrace.tracing import plan, trace

FLAGS = {"output_hidden_states": True, "output_attentions": True}
MAP = {"hidden_states": TinyDecoderLayer, "attentions": TinyAttention}


def test_a_head_ties_at_its_base_models_exit(input_ids) -> None:
    head = build(Head)
    with torch.no_grad():
        own = head(input_ids, **FLAGS)
        with trace(head) as captures:
            head(input_ids)
    assert_same(captures["hidden_states"], own["hidden_states"])
    # Tied to the base model's post-norm state, not the pre-norm output of its last layer; the
    # head's extra layer (outside the decorated forward) is not recorded.
    assert torch.equal(captures["hidden_states"][-1], head.model(input_ids).last_hidden_state)
    assert len(captures["hidden_states"]) == 3 and len(captures["attentions"]) == 2
    assert hook_count(head) == 0


def test_a_nested_decorated_model_keeps_its_own_captures(input_ids) -> None:
    outer = build(Outer)
    with torch.no_grad():
        own = outer(input_ids, **FLAGS)
        with trace(outer) as captures:
            outer(input_ids)
    assert len(own.hidden_states) == 3  # the tower's two layers are not the outer model's
    for key in ("hidden_states", "attentions"):
        assert_same(captures[key], own[key], key)


def test_encoder_decoder_keys_are_named_as_transformers_names_them(input_ids) -> None:
    model = build(EncoderDecoder)
    with torch.no_grad():
        own = model(input_ids, **FLAGS)
        with trace(model) as captures:
            model(input_ids)
    assert set(captures) == {
        "encoder_hidden_states",
        "encoder_attentions",
        "decoder_hidden_states",
        "decoder_attentions",
        "cross_attentions",
    }
    for part in ("encoder", "decoder"):
        for key in ("hidden_states", "attentions"):
            assert_same(captures[f"{part}_{key}"], own[part][key], f"{part}_{key}")
    assert_same(captures["cross_attentions"], own["decoder"].cross_attentions)
    assert len(captures["cross_attentions"]) == 1 and len(captures["decoder_attentions"]) == 2


def test_outputs_selects_a_prefixed_key(input_ids) -> None:
    model = build(EncoderDecoder)
    with torch.no_grad(), trace(model, outputs="decoder_hidden_states") as captures:
        model(input_ids)
    assert list(captures) == ["decoder_hidden_states"]
    with pytest.raises(KeyError, match="did you mean 'decoder_hidden_states'"):
        with trace(model, outputs="decoder_hidden_state"):
            pass


DEAD = """\
yamltrace: 1
imports: [yamltrace.examples.tiny]
outputs:
  hidden_states: TinyDecoderLayer
  attentions:
    - TinyAttention
    - {target: torch.nn:Embedding, layer_name: nowhere}
  mlp: {class_name: .mlp.gate, index: 0}
"""


def test_a_dead_recorder_is_a_located_error_with_the_closest_names(tmp_path: Path, input_ids) -> None:
    path = tmp_path / "dead.yaml"
    path.write_text(DEAD, encoding="utf-8")
    tiny = build(TinyModel)
    with pytest.raises(SpecError) as caught:
        with trace(tiny, path):
            pass
    lines = str(caught.value).splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"{path}:7:") and "class Embedding with layer_name 'nowhere' matches no module" in lines[0]
    assert lines[1].startswith(f"{path}:8:") and "closest module paths: .mlp.gate_proj" in lines[1]
    assert "optional: true" in lines[1] and "strict=False" in lines[1]
    assert hook_count(tiny) == 0


def test_strict_false_warns_and_captures_the_rest(tmp_path: Path, input_ids) -> None:
    tiny = build(TinyModel)
    with pytest.warns(UserWarning, match="matches no module"), torch.no_grad():
        with trace(tiny, load_spec(DEAD), strict=False) as captures:
            tiny(input_ids)
    assert len(captures["hidden_states"]) == 3 and captures["mlp"] == ()


def test_a_plain_string_in_a_dict_spec_is_a_path_suffix_checked_like_any_recorder() -> None:
    tiny = build(TinyModel)
    with pytest.raises(
        SpecError, match=r"path suffix 'TinyAttention' matches no module.*TinyAttention is the class of .layers.0.self_attn"
    ):
        with trace(tiny, {"attentions": "TinyAttention"}):
            pass
    plan(tiny, {"attentions": OutputRecorder(class_name="self_attn", index=1)})  # (checked as `trace` checks it)


def test_an_optional_recorder_may_match_nothing(input_ids) -> None:
    tiny = build(TinyModel)
    spec = {"hidden_states": TinyDecoderLayer, "cross_attentions": OutputRecorder(nn.Embedding, layer_name="x", optional=True)}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with torch.no_grad(), trace(tiny, spec) as captures:
            tiny(input_ids)
    assert captures["cross_attentions"] == () and len(captures["hidden_states"]) == 3


class FusedAttention(TinyAttention):
    """A replacement that adds no state (patch_model swaps the class in place)."""


def test_unapplied_patches_are_an_error_saying_how_to_apply_them(input_ids) -> None:
    tiny = build(TinyModel)
    spec = Spec(outputs=MAP, patches=(PatchEntry("TinyAttention", FusedAttention, "FusedAttention"),))
    with pytest.raises(SpecError, match=r"\$.patches\['TinyAttention'\]: trace does not apply.*patch_model\(model, spec\)"):
        with trace(tiny, spec):
            pass
    with torch.no_grad():
        own = tiny(input_ids, **FLAGS)
        handle = patch_model(tiny, spec)
        assert all(isinstance(layer.self_attn, FusedAttention) for layer in tiny.layers)
        with trace(tiny, spec) as captures:
            tiny(input_ids)
        handle.remove()
    assert not any(isinstance(m, FusedAttention) for m in tiny.modules())
    assert_same(captures["attentions"], own.attentions)


class NoWeights(TinyAttention):
    """Attention that, like SDPA, returns no weights."""

    def forward(self, hidden_states: torch.Tensor, **kwargs: Any) -> tuple[torch.Tensor, None]:
        return super().forward(hidden_states)[0], None


def test_a_key_whose_modules_return_no_tensor_warns_once_naming_eager(input_ids) -> None:
    tiny = build(TinyModel)
    for layer in tiny.layers:
        layer.self_attn.__class__ = NoWeights
    with pytest.warns(UserWarning, match=r"'attentions' recorded no tensor.*attn_implementation=\"eager\""):
        with torch.no_grad(), trace(tiny) as captures:
            tiny(input_ids)
    assert captures["attentions"] == ()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with torch.no_grad(), trace(tiny):
            tiny(input_ids)


def test_a_block_without_calls_says_only_that_it_made_none() -> None:
    tiny = build(TinyModel)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with trace(tiny) as captures:
            pass
    assert captures["attentions"] == ()
    assert [w.category for w in caught] == [NeverRanWarning]
    assert "without a call of the TinyModel" in str(caught[0].message)


class _DecoratedEncoderDecoder(EncoderDecoder):
    """An encoder-decoder whose forward carries the capture decorator with an empty map (like M2M100Model):
    it records nothing itself and returns its parts' captures."""

    _can_record_outputs: dict[str, Any] = {}

    @capture_outputs
    def forward(self, input_ids: torch.Tensor, **kwargs: Any) -> dict[str, Any]:
        return super().forward(input_ids, **kwargs)


def test_a_decorated_forward_with_an_empty_map_yields_its_nested_models_captures(input_ids) -> None:
    model = build(_DecoratedEncoderDecoder)
    with torch.no_grad():
        own = model(input_ids, **FLAGS)
        with trace(model) as captures:
            model(input_ids)
    assert set(captures) == {
        "encoder_hidden_states",
        "encoder_attentions",
        "decoder_hidden_states",
        "decoder_attentions",
        "cross_attentions",
    }
    for part in ("encoder", "decoder"):
        for key in ("hidden_states", "attentions"):
            assert_same(captures[f"{part}_{key}"], own[part][key], f"{part}_{key}")
    assert len(captures["encoder_hidden_states"]) == 3
