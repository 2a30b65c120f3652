"""Captured values know their module: `Captures.paths`, `by_path` and `stack`, per step."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from yamltrace import NeverRanWarning
from yamltrace.engine import OutputRecorder
from yamltrace.examples.tiny import TinyAttention, TinyDecoderLayer, TinyMLP
from yamltrace.tracing import trace


def test_paths_name_each_value_as_named_modules_does(tiny, input_ids) -> None:
    with trace(tiny, {"hidden_states": TinyDecoderLayer, "mlp": OutputRecorder(TinyMLP, index=0)}) as captures:
        tiny(input_ids)
    layers = tiny.config.num_hidden_layers
    assert captures.paths("hidden_states") == ("layers.0:input", *(f"layers.{i}" for i in range(layers)))
    assert captures.paths("mlp") == tuple(f"layers.{i}.mlp" for i in range(layers))
    modules = dict(tiny.named_modules())
    for path in captures.paths("mlp"):
        assert isinstance(modules[path], TinyMLP)


def test_by_path_maps_paths_to_the_captured_values(tiny, input_ids) -> None:
    with trace(tiny, {"attentions": TinyAttention}) as captures:
        tiny(input_ids)
    found = captures.by_path("attentions")
    assert list(found) == [f"layers.{i}.self_attn" for i in range(tiny.config.num_hidden_layers)]
    for value, expected in zip(found.values(), captures["attentions"]):
        assert value is expected


def test_by_path_omits_positions_left_out_by_layers(tiny, input_ids) -> None:
    with trace(tiny, {"mlp": OutputRecorder(TinyMLP, index=0, layers=(0, -1))}) as captures:
        tiny(input_ids)
    assert list(captures.by_path("mlp")) == ["layers.0.mlp", "layers.3.mlp"]
    assert captures.paths("mlp")[1] == "layers.1.mlp" and captures["mlp"][1] is None


def test_stack_gives_one_tensor_per_layer(tiny, input_ids) -> None:
    with trace(tiny, {"hidden_states": OutputRecorder(TinyDecoderLayer, index=0, positions=[-1])}) as captures:
        tiny(input_ids)
    stacked = captures.stack("hidden_states")
    assert stacked.shape == (tiny.config.num_hidden_layers + 1, 2, 1, 32)
    for row, value in zip(stacked, captures["hidden_states"]):
        assert torch.equal(row, value)


def test_stack_of_differing_shapes_names_each_path_and_shape(tiny, input_ids) -> None:
    spec = {"mixed": [OutputRecorder(TinyMLP, index=0), OutputRecorder(nn.Linear, layer_name="gate_proj", index=0)]}
    with trace(tiny, spec) as captures:
        tiny(input_ids)
    with pytest.raises(
        ValueError, match=r"differ in shape \(layers\.0\.mlp\.gate_proj: \(2, 7, 64\); layers\.0\.mlp: \(2, 7, 32\)"
    ):
        captures.stack("mixed")


def test_steps_are_kept_apart(tiny, input_ids) -> None:
    with trace(tiny, {"mlp": OutputRecorder(TinyMLP, index=0)}) as captures:
        tiny(input_ids)
        tiny(input_ids[:, :3])
    assert len(captures.steps) == 2
    with pytest.raises(ValueError, match=r"the trace has 2 steps; pass step=i"):
        captures.by_path("mlp")
    with pytest.raises(ValueError, match=r"the trace has 2 steps"):
        captures.stack("mlp")
    assert captures.stack("mlp", step=1).shape == (tiny.config.num_hidden_layers, 2, 3, 32)
    assert captures.stack("mlp", step=-2).shape == (tiny.config.num_hidden_layers, 2, 7, 32)
    assert captures.paths("mlp", step=0) == captures.paths("mlp", step=1)
    assert len(captures.paths("mlp")) == 2 * tiny.config.num_hidden_layers
    with pytest.raises(IndexError, match="step 2 out of range"):
        captures.paths("mlp", step=2)


def test_a_failed_step_leaves_no_paths_behind(tiny, input_ids) -> None:
    def fail(module, args):
        raise RuntimeError("failed on purpose")

    with trace(tiny, {"mlp": OutputRecorder(TinyMLP, index=0)}) as captures:
        handle = tiny.layers[2].register_forward_pre_hook(fail)
        with pytest.raises(RuntimeError, match="on purpose"):
            tiny(input_ids)  # fails after two MLPs were recorded
        handle.remove()
        tiny(input_ids)
    assert len(captures.paths("mlp")) == len(captures["mlp"]) == tiny.config.num_hidden_layers


def test_a_module_called_twice_has_no_single_value() -> None:
    shared = nn.Linear(3, 3)
    net = nn.Sequential(shared, nn.ReLU(), shared)
    with trace(net, {"linear": OutputRecorder(nn.Linear, index=0)}) as captures:
        net(torch.ones(1, 3))
    assert captures.paths("linear") == ("0", "0")
    with pytest.raises(ValueError, match=r"module 0 produced more than one value"):
        captures.by_path("linear")


def test_unknown_key_and_empty_stack_are_errors(tiny, input_ids) -> None:
    with (
        pytest.warns(NeverRanWarning, match="without a call"),
        trace(tiny, {"mlp": OutputRecorder(TinyMLP, index=0)}) as captures,
    ):
        pass  # (no call of the model: nothing captured)
    with pytest.raises(KeyError, match="'mpl' was not traced"):
        captures.by_path("mpl")
    with pytest.raises(ValueError, match=r"nothing was captured for 'mlp'"):
        captures.stack("mlp")


def test_stack_errors_name_stack_and_the_call_that_joins_steps(tiny, input_ids) -> None:
    with trace(tiny, {"mlp": OutputRecorder(TinyMLP, index=0)}) as captures:
        tiny(input_ids)
        tiny(input_ids[:, :1])
    with pytest.raises(ValueError, match=r"^stack\('mlp'\): the trace has 2 steps; .*cat_steps\('mlp'\)") as raised:
        captures.stack("mlp")
    assert "by_path" not in str(raised.value)
    shared = nn.Linear(3, 3)
    net = nn.Sequential(shared, nn.ReLU(), shared)
    with trace(net, {"linear": OutputRecorder(nn.Linear, index=0)}) as captures:
        net(torch.ones(1, 3))
    with pytest.raises(ValueError, match=r"^stack\('linear'\): module 0 produced more than one value"):
        captures.stack("linear")


def test_cat_steps_joins_each_modules_steps_along_the_sequence(tiny, input_ids) -> None:
    spec = {"mlp": OutputRecorder(TinyMLP, index=0, layers=(0, -1)), "attn": OutputRecorder(TinyAttention, index=1)}
    with trace(tiny, spec) as captures:
        tiny(input_ids)
        tiny(input_ids[:, :1])
        tiny(input_ids[:, :1])
    joined = captures.cat_steps("mlp")
    first, second, third = (step["mlp"] for step in captures.steps)
    assert len(joined) == tiny.config.num_hidden_layers and joined[1] is None and joined[2] is None
    for i in (0, 3):
        assert torch.equal(joined[i], torch.cat([first[i], second[i], third[i]], dim=1))
    assert joined[0].shape == (2, 9, 32)
    assert torch.equal(captures.cat_steps("mlp", dim=-2)[3], joined[3])
    with pytest.raises(ValueError, match=r"cat_steps\('attn'\): module layers\.0\.self_attn \(value 0\): step 1 has shape"):
        captures.cat_steps("attn", dim=2)  # the key length differs between steps


class _Skipping(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first, self.second = nn.Linear(3, 3), nn.Linear(3, 3)

    def forward(self, x: torch.Tensor, skip: bool = False) -> torch.Tensor:
        return self.first(x) if skip else self.second(self.first(x))


def test_cat_steps_refuses_steps_of_other_modules() -> None:
    net = _Skipping()
    with trace(net, {"linear": OutputRecorder(nn.Linear, index=0)}) as captures:
        net(torch.ones(1, 2, 3))
        net.second(torch.ones(1, 2, 3))  # outside a call of net: not a step
    assert torch.equal(captures.cat_steps("linear")[1], captures["linear"][1])
    with trace(net, {"linear": OutputRecorder(nn.Linear, index=0)}) as captures:
        net(torch.ones(1, 2, 3))
        net(torch.ones(1, 1, 3), skip=True)
    with pytest.raises(ValueError, match=r"step 1 captured modules \['first'\], step 0 \['first', 'second'\]"):
        captures.cat_steps("linear")
    with pytest.warns(NeverRanWarning, match="without a call"):
        with trace(net, {"linear": OutputRecorder(nn.Linear, index=0, layers=(0,))}) as empty:
            pass
    with pytest.raises(ValueError, match=r"cat_steps\('linear'\): the trace has no finished step"):
        empty.cat_steps("linear")


def test_split_heads_gives_each_head_its_own_dimension(tiny, input_ids) -> None:
    recorder = OutputRecorder(nn.Linear, layer_name="self_attn.o_proj", input=0)
    spec = {"attention_heads": recorder, "weights": OutputRecorder(TinyAttention, index=1)}
    values: list[torch.Tensor] = []
    handle = tiny.layers[0].self_attn.v_proj.register_forward_hook(lambda m, a, out: values.append(out))
    with trace(tiny, spec) as captures:
        tiny(input_ids)
    handle.remove()
    split = captures.split_heads("attention_heads")
    heads, head_dim = tiny.config.num_attention_heads, tiny.config.hidden_size // tiny.config.num_attention_heads
    assert [tuple(s.shape) for s in split] == [(2, 7, heads, head_dim)] * tiny.config.num_hidden_layers
    assert split[0].data_ptr() == captures["attention_heads"][0].data_ptr()  # a view
    value = values[0].unflatten(-1, (heads, head_dim)).transpose(1, 2)  # [batch, heads, seq, head_dim]
    for head in range(heads):  # head h of the split is head h's attention output
        expected = captures["weights"][0][:, head] @ value[:, head]
        torch.testing.assert_close(split[0][:, :, head], expected)


def test_split_heads_without_a_head_count_needs_one() -> None:
    net = nn.Sequential(nn.Linear(6, 6), nn.Linear(6, 6))
    with trace(net, {"x": OutputRecorder(nn.Linear, index=0, layers=(1,))}) as captures:
        net(torch.ones(1, 2, 6))
    with pytest.raises(ValueError, match=r"split_heads\('x'\): module 1: no module on its path says how many heads"):
        captures.split_heads("x")
    none, split = captures.split_heads("x", heads=3)
    assert none is None and split.shape == (1, 2, 3, 2)
    with pytest.raises(ValueError, match=r"module 1: a last dimension of 6 does not split into 4 heads"):
        captures.split_heads("x", heads=4)
