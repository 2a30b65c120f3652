"""Oracle: yamltrace captures equal the installed transformers' own outputs, tensor for tensor.

Two paths per model: (a) `trace(model)` on the transformers model itself; (b) the same forward code
under yamltrace's `merge_with_config_defaults` + `capture_outputs` (see `_oracle.redecorated`).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn
from transformers.utils.output_capturing import capture_outputs as hf_capture_outputs

from helpers import assert_same, hook_count
from helpers_transformers import CASES, TOY_DIM, Case, ToyConfig, build_pair, make_composite, make_normed
from yamltrace.capture import capture_outputs
from yamltrace.engine import OutputRecorder, normalize_output_map
from yamltrace.tracing import trace

pytestmark = pytest.mark.oracle

FLAGS = {"output_hidden_states": True, "output_attentions": True}


def captured_keys(model: nn.Module) -> list[str]:
    return list(dict.fromkeys(key for key, _ in normalize_output_map(model._can_record_outputs)))


@pytest.fixture(scope="module", params=CASES, ids=lambda case: case.name)
def case(request) -> tuple[Case, nn.Module, nn.Module, dict[str, torch.Tensor], Any]:
    case = request.param
    model, twin = build_pair(case)
    inputs = case.inputs()
    with torch.no_grad():
        expected = model(**inputs, **FLAGS)
    return case, model, twin, inputs, expected


def test_cases_capture_something_for_every_key(case) -> None:
    _, model, _, _, expected = case
    keys = captured_keys(model)
    assert "hidden_states" in keys and "attentions" in keys
    assert len(expected.hidden_states) == model.config.num_hidden_layers + 1
    assert len(expected.attentions) == model.config.num_hidden_layers


def test_trace_equals_the_models_own_outputs(case) -> None:
    _, model, _, inputs, expected = case
    with torch.no_grad(), trace(model) as captures:
        model(**inputs)
    assert list(captures) == captured_keys(model)
    for key in captures:
        assert_same(captures[key], getattr(expected, key), key)


def test_trace_selection_equals_output_hidden_states_indices(case) -> None:
    _, model, _, inputs, _ = case
    with torch.no_grad():
        expected = model(**inputs, output_hidden_states=[0, -1])
    spec = dict(model._can_record_outputs)
    spec["hidden_states"] = OutputRecorder(spec["hidden_states"], layers=(0, -1))
    with torch.no_grad(), trace(model, spec, outputs="hidden_states") as captures:
        model(**inputs)
    assert expected.hidden_states[1] is None
    assert_same(captures["hidden_states"], expected.hidden_states)


def test_capture_outputs_on_the_same_forward_code_equals_transformers(case) -> None:
    _, model, twin, inputs, expected = case
    with torch.no_grad():
        actual = twin(**inputs, **FLAGS)
    assert type(actual) is type(expected)
    assert list(actual.keys()) == list(expected.keys())
    for key in expected.keys():
        assert_same(actual[key], expected[key], key)
    assert hook_count(twin) > 0  # held for the next capturing forward (docs/capture.md)
    with torch.no_grad():
        twin(**inputs)  # a forward without capture removes them
    assert hook_count(twin) == 0


def test_capture_outputs_selection_and_return_dict_false_equal_transformers(case) -> None:
    _, model, twin, inputs, _ = case
    with torch.no_grad():
        expected = model(**inputs, output_hidden_states=[0, -1])
        actual = twin(**inputs, output_hidden_states=[0, -1])
        expected_tuple = model(**inputs, **FLAGS, return_dict=False)
        actual_tuple = twin(**inputs, **FLAGS, return_dict=False)
    assert expected.hidden_states[1] is None
    assert_same(actual.hidden_states, expected.hidden_states, "hidden_states")
    assert actual.attentions is None and expected.attentions is None
    assert_same(actual_tuple, expected_tuple)


def test_capture_off_matches_and_installs_nothing(case) -> None:
    _, model, twin, inputs, _ = case
    with torch.no_grad():
        expected = model(**inputs)
        actual = twin(**inputs)
    assert list(actual.keys()) == list(expected.keys())
    assert actual.hidden_states is None and actual.attentions is None
    assert_same(actual.last_hidden_state, expected.last_hidden_state)
    assert hook_count(twin) == 0


def test_gpt2_layer_name_tells_self_from_cross_attention() -> None:
    gpt2 = next(c for c in CASES if c.name == "gpt2-cross-attention")
    model, twin = build_pair(gpt2)
    inputs = gpt2.inputs()
    with torch.no_grad():
        out = twin(**inputs, **FLAGS)
    # Self-attention weights are square over the sequence; cross-attention weights span the encoder.
    assert {a.shape[-2:] for a in out.attentions} == {(7, 7)}
    assert {a.shape[-2:] for a in out.cross_attentions} == {(7, 5)}


@pytest.mark.parametrize("inner_decorated", [True, False], ids=["nested-decorated", "nested-plain"])
def test_composite_models_follow_transformers(inner_decorated) -> None:
    torch.manual_seed(0)
    config = ToyConfig(num_hidden_layers=1)
    reference = make_composite(hf_capture_outputs, inner_decorated)(config).eval()
    model = make_composite(capture_outputs, inner_decorated)(config).eval()
    model.load_state_dict(reference.state_dict())
    x = torch.randn(2, 5, TOY_DIM, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        expected = reference(x, **FLAGS)
        actual = model(x, **FLAGS)
    for key in ("last_hidden_state", "inner_hidden_states", "hidden_states", "attentions"):
        assert_same(getattr(actual, key), getattr(expected, key), key)
    # Pin what transformers does: a decorated nested forward keeps its subtree's states for itself.
    assert len(expected.hidden_states) == (2 if inner_decorated else 4)
    assert (expected.inner_hidden_states is None) is not inner_decorated
    assert len(expected.attentions) == 1  # nested attention modules follow the nested map: not recorded
    with torch.no_grad():
        model(x)  # a forward without capture removes the hooks held since the capturing one
    assert hook_count(model) == 0


@pytest.mark.parametrize("tie", [True, False])
def test_tie_last_follows_transformers_decorator_argument(tie) -> None:
    torch.manual_seed(0)
    config = ToyConfig(num_hidden_layers=2)
    reference = make_normed(hf_capture_outputs, tie)(config).eval()
    model = make_normed(capture_outputs, tie)(config).eval()
    model.load_state_dict(reference.state_dict())
    x = torch.randn(2, 5, TOY_DIM, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        expected = reference(x, **FLAGS)
        actual = model(x, **FLAGS)
        with trace(reference) as captures:
            reference(x)
    assert torch.equal(expected.hidden_states[-1], expected.last_hidden_state) is tie
    for key in ("hidden_states", "attentions"):
        assert_same(actual[key], expected[key], key)
        assert_same(captures[key], expected[key], key)
