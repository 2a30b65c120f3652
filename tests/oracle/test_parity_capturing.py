"""Parity of output capturing: the MyPreTrainedModel / MyModel pattern, written once per library.

Each test runs on transformers and on yamltrace with the same assertions (capture flags from kwargs
and config, `layer_name` filters, layer selection, `return_dict`, recorders after a patch); the
last test builds both with the same weights and compares the captured tensors themselves.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
from helpers_parity import LIBRARIES, lib, library, my_model  # noqa: F401 (lib: the fixture)
from torch import nn

pytestmark = pytest.mark.oracle

LAYERS = 3


def build(lib: SimpleNamespace, **config: Any) -> tuple[SimpleNamespace, nn.Module]:
    classes = my_model(lib)
    torch.manual_seed(0)
    return classes, classes.MyModel(classes.MyConfig(num_hidden_layers=LAYERS, **config)).eval()


INPUT = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(1))


def shapes(values: Any) -> Any:
    return None if values is None else [None if v is None else tuple(v.shape) for v in values]


def test_nothing_is_captured_without_a_flag(lib: SimpleNamespace) -> None:
    _, model = build(lib)
    output = model(INPUT)
    assert (output.hidden_states, output.attentions, getattr(output, "cross_attentions", None)) == (None, None, None)


def test_hidden_states_are_the_input_then_one_per_layer_tied_to_the_last(lib: SimpleNamespace) -> None:
    _, model = build(lib)
    output = model(INPUT, output_hidden_states=True)
    assert shapes(output.hidden_states) == [(2, 5, 8)] * (LAYERS + 1)
    assert torch.equal(output.hidden_states[0], INPUT)
    assert torch.equal(output.hidden_states[-1], output.last_hidden_state)
    assert output.attentions is None


def test_output_attentions_also_switches_on_cross_attentions(lib: SimpleNamespace) -> None:
    _, model = build(lib)
    output = model(INPUT, output_attentions=True)
    assert shapes(output.attentions) == shapes(output.cross_attentions) == [(2, 5, 5)] * LAYERS
    assert output.hidden_states is None


def test_layer_name_tells_attn_from_crossattention(lib: SimpleNamespace) -> None:
    _, model = build(lib)
    seen: dict[str, list[torch.Tensor]] = {"attn": [], "crossattention": []}
    for layer in model.layers:
        for name in seen:
            getattr(layer, name).register_forward_hook(lambda m, a, out, name=name: seen[name].append(out[1]))
    output = model(INPUT, output_attentions=True)
    assert all(torch.equal(a, b) for a, b in zip(output.attentions, seen["attn"], strict=True))
    assert all(torch.equal(a, b) for a, b in zip(output.cross_attentions, seen["crossattention"], strict=True))


def test_flags_come_from_the_config_when_not_passed(lib: SimpleNamespace) -> None:
    _, model = build(lib, output_hidden_states=True)
    assert len(model(INPUT).hidden_states) == LAYERS + 1
    assert model(INPUT, output_hidden_states=False).hidden_states is None


@pytest.mark.parametrize("off", [False, 0, None, []])
def test_a_falsy_flag_is_off(lib: SimpleNamespace, off: Any) -> None:
    _, model = build(lib)
    assert model(INPUT, output_hidden_states=off, output_attentions=off).attentions is None


@pytest.mark.parametrize(
    "selection, kept",
    [(-1, [LAYERS]), ([0], [0]), ([0, -1], [0, LAYERS]), ([1, 2], [1, 2]), ([LAYERS + 5], [])],
)
def test_hidden_state_selection_keeps_the_positions_asked_for(lib: SimpleNamespace, selection: Any, kept: list[int]) -> None:
    _, model = build(lib)
    everything = model(INPUT, output_hidden_states=True).hidden_states
    selected = model(INPUT, output_hidden_states=selection).hidden_states
    assert len(selected) == LAYERS + 1
    assert [i for i, state in enumerate(selected) if state is not None] == kept
    assert all(torch.equal(selected[i], everything[i]) for i in kept)


def test_return_dict_false_gives_the_tuple(lib: SimpleNamespace) -> None:
    _, model = build(lib)
    output = model(INPUT, output_hidden_states=True, return_dict=False)
    assert isinstance(output, tuple) and len(output) == 2
    assert len(output[1]) == LAYERS + 1


def test_recorders_follow_a_patch_after_patch_output_recorders(lib: SimpleNamespace) -> None:
    classes, model = build(lib)

    class FastAttention(nn.Module):  # not an Attention: only a retargeted recorder hooks it
        forward = classes.Attention.forward

    for layer in model.layers:  # the model was built outside from_pretrained and swapped by hand
        layer.attn.__class__ = FastAttention
        layer.crossattention.__class__ = FastAttention
    lib.register_patch_mapping({"^Attention$": FastAttention})
    lib.patch_output_recorders(model)
    output = model(INPUT, output_attentions=True, output_hidden_states=True)
    assert shapes(output.attentions) == shapes(output.cross_attentions) == [(2, 5, 5)] * LAYERS
    assert len(output.hidden_states) == LAYERS + 1


def test_both_libraries_capture_the_same_tensors() -> None:
    outputs, weights = [], None
    for name in LIBRARIES:
        _, model = build(library(name))
        weights = weights or model.state_dict()  # the libraries initialise weights differently
        model.load_state_dict(weights)
        outputs.append(model(INPUT, output_hidden_states=True, output_attentions=True))
    ours, theirs = outputs[1], outputs[0]
    for key in ("hidden_states", "attentions", "cross_attentions"):
        assert all(torch.equal(a, b) for a, b in zip(getattr(ours, key), getattr(theirs, key), strict=True)), key
    assert torch.equal(ours.last_hidden_state, theirs.last_hidden_state)
