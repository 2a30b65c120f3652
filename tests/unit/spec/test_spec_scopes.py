"""Scoped specs: `scopes` and `optional` read, validate and write back; composites export and round-trip."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from helpers import assert_same
from helpers_scopes import EncoderDecoder, Head, Outer, build
from yamltrace.capture import capture_outputs
from yamltrace.errors import SpecError
from yamltrace.modeling import BaseModelOutputWithPast
from yamltrace.examples.tiny import TinyAttention, TinyDecoderLayer, TinyModel
from yamltrace.spec import load_spec, spec_from_model, validate_spec
from yamltrace.tracing import trace

SCOPED = """\
yamltrace: 1
imports: [yamltrace.examples.tiny]
scopes:
  model:
    outputs:
      hidden_states: TinyDecoderLayer
      attentions: {target: TinyAttention, optional: true}
    options: {tie_last_hidden_states: false}
"""


def test_scopes_load_with_their_options_and_write_back_equal() -> None:
    spec = load_spec(SCOPED)
    assert not spec.outputs and list(spec.scopes) == ["model"]
    scope = spec.scopes["model"]
    assert scope.outputs["hidden_states"][0].target_class is TinyDecoderLayer
    assert scope.outputs["attentions"][0].optional and scope.outputs["attentions"][0].target_class is TinyAttention
    assert dict(scope.options) == {"tie_last_hidden_states": False}
    assert spec.where("model", "attentions", 0).line == 7
    assert load_spec(spec.to_yaml()) == spec


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("scopes: {'model/enc': {outputs: {}}}", r"\$.scopes\['model/enc'\]: key 'model/enc' does not match"),
        ("scopes: {model: {options: {}}}", "outputs"),
        ("outputs: {a: {target: X, optional: 1}}", "not of type 'boolean'"),
    ],
)
def test_schema_rejects_bad_scopes(text: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        validate_spec(f"yamltrace: 1\n{text}\n")


def test_a_scope_option_turns_tie_last_off_for_that_scope(input_ids) -> None:
    head = build(Head)
    with torch.no_grad(), trace(head, SCOPED) as captures:
        head(input_ids)
    pre_norm = head.model.layers[-1](captures["hidden_states"][-2])
    assert torch.equal(captures["hidden_states"][-1], pre_norm)


def test_a_missing_scope_is_a_located_error(input_ids) -> None:
    with pytest.raises(SpecError, match=r":6:\d+: .*has no submodule 'model'.*"):
        with trace(build(Outer), SCOPED):
            pass


@pytest.mark.parametrize("cls", [Head, Outer, EncoderDecoder], ids=lambda c: c.__name__)
def test_composites_export_and_round_trip_to_the_same_captures(cls, input_ids) -> None:
    model = build(cls)
    spec = spec_from_model(model)
    loaded = load_spec(spec.to_yaml(), for_model=model)
    assert loaded == spec
    with torch.no_grad():
        with trace(model) as own:
            model(input_ids)
        with trace(model, loaded) as exported:
            model(input_ids)
    assert list(exported) == list(own)
    for key in own:
        assert_same(exported[key], own[key], key)


def test_export_writes_one_scope_per_decorated_model_and_marks_what_is_absent_optional() -> None:
    spec = spec_from_model(build(EncoderDecoder))
    assert not spec.outputs and list(spec.scopes) == ["encoder", "decoder"]
    assert [r.optional for rs in spec.scopes["decoder"].outputs.values() for r in rs] == [False, False, False]
    head = spec_from_model(Head)  # a class: built on the meta device from its default config
    assert list(head.scopes) == ["model"] and not head.outputs
    with pytest.raises(ValueError, match=r"pass an instance: spec_from_model\(model\)"):
        spec_from_model(EncoderDecoder)  # no config class, no decorator: its structure is unknown
    outer = spec_from_model(build(Outer))
    assert list(outer.outputs) == ["hidden_states", "attentions"] and list(outer.scopes) == ["tower"]


class _UntiedOuter(Outer):
    """`Outer` whose own decorator does not tie (as Llama4ForConditionalGeneration's); its tower ties."""

    @capture_outputs(tie_last_hidden_states=False)
    def forward(self, input_ids: torch.Tensor, **kwargs: Any) -> BaseModelOutputWithPast:
        return Outer.forward.__wrapped__(self, input_ids, **kwargs)


class _UntiedEmptyOuter(_UntiedOuter):
    """The same with an empty map: it records nothing, its tower records and ties."""

    _can_record_outputs: dict[str, Any] = {}


@pytest.mark.parametrize("cls", [_UntiedOuter, _UntiedEmptyOuter], ids=lambda c: c.__name__)
def test_a_scope_under_an_untied_root_keeps_its_own_tie_last(cls, input_ids) -> None:
    model = build(cls)
    spec = spec_from_model(model)
    if cls is _UntiedEmptyOuter:  # nothing recorded at the top: no options to inherit
        assert not spec.outputs and not spec.options and not spec.scopes["tower"].options
    else:  # the top-level `false` would be inherited: the tower says it ties
        assert dict(spec.options) == {"tie_last_hidden_states": False}
        assert dict(spec.scopes["tower"].options) == {"tie_last_hidden_states": True}
    with torch.no_grad():
        with trace(model) as own:
            model(input_ids)
        with trace(model, load_spec(spec.to_yaml(), for_model=model)) as exported:
            model(input_ids)
    assert list(exported) == list(own) and own
    for key in own:
        assert_same(exported[key], own[key], key)


class _Switching(nn.Module):
    """A submodule that declares its own map but whose forward carries no decorator (as BltModel's local
    encoder): under the model's own maps its subtree records only `local_attentions`."""

    _can_record_outputs = {"local_attentions": TinyAttention}

    def __init__(self, config: Any) -> None:
        super().__init__()
        self.layers = nn.ModuleList(TinyDecoderLayer(config) for _ in range(2))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            hidden = layer(hidden)
        return hidden


class _SwitchingOuter(TinyModel):
    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.local = _Switching(config)

    @capture_outputs
    def forward(self, input_ids: torch.Tensor, **kwargs: Any) -> BaseModelOutputWithPast:
        hidden = self.local(self.embed_tokens(input_ids))
        for layer in self.layers:
            hidden = layer(hidden)
        return BaseModelOutputWithPast(last_hidden_state=self.norm(hidden))


def test_export_refuses_a_model_that_switches_maps_inside_its_subtree(input_ids) -> None:
    model = build(_SwitchingOuter)
    with torch.no_grad(), trace(model) as own:
        model(input_ids)
    # Its own maps leave the local layers out of hidden_states; a spec cannot say so, so no spec is exported.
    assert len(own["hidden_states"]) == model.config.num_hidden_layers + 1
    with pytest.raises(ValueError, match=r"switches capture maps.*also hook 4 module\(s\).*local\.layers\.0 "):
        spec_from_model(model)
