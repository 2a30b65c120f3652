"""`capture_outputs`: REFERENCE §1 rules 1-8, one by one, on small models written here; then the
recorder capture options (`detach`, `to`, `dtype`).

Expected tensors are recomputed by calling the submodules by hand, so every check is `torch.equal`
against an independent computation.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import pytest
import torch
from torch import nn

from helpers import assert_same, hook_count
from yamltrace.capture import capture_outputs
from yamltrace.engine import release_hooks
from yamltrace.engine import active_sessions
from yamltrace.modeling import Config
from yamltrace.engine import Collector
from yamltrace.modeling import PreTrainedModel
from yamltrace.modeling import BaseModelOutput, ModelOutput
from yamltrace.engine import OutputRecorder
from yamltrace.tracing import trace

DIM = 8


class Attn(nn.Module):
    """Self-attention returning `(output, weights)`; weights are `None` when `weights=False`."""

    def __init__(self, weights: bool = True) -> None:
        super().__init__()
        self.proj = nn.Linear(DIM, DIM)
        self.weights = weights

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        w = torch.softmax(x @ x.transpose(-1, -2), dim=-1)
        return self.proj(w @ x), (w if self.weights else None)


class Layer(nn.Module):
    """Self- then cross-attention (both `Attn`); returns a bare tensor, not a tuple."""

    def __init__(self, weights: bool = True, fail: bool = False) -> None:
        super().__init__()
        self.attn = Attn(weights)
        self.crossattention = Attn(weights)
        self.fail = fail

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fail:
            raise RuntimeError("layer failed on purpose")
        x = x + self.attn(x)[0]
        return x + self.crossattention(x)[0]


class ToyModel(PreTrainedModel):
    """Embedding, `Layer`s and a final norm, with a decorated forward like a transformers base model."""

    _can_record_outputs = {
        "hidden_states": Layer,
        "attentions": OutputRecorder(Attn, index=1, layer_name="attn"),
        "cross_attentions": OutputRecorder(Attn, index=1, layer_name="crossattention"),
    }

    def __init__(self, config: Config | None = None, layers: int = 2, weights: bool = True) -> None:
        super().__init__(config or Config(num_hidden_layers=layers))
        self.embed = nn.Linear(DIM, DIM)
        self.layers = nn.ModuleList(Layer(weights) for _ in range(layers))
        self.norm = nn.LayerNorm(DIM)
        self.post_init()

    @capture_outputs
    def forward(self, x: torch.Tensor, **kwargs: Any) -> BaseModelOutput:
        x = self.embed(x)
        for layer in self.layers:
            x = layer(x)
        return BaseModelOutput(last_hidden_state=self.norm(x))


class UntiedToyModel(ToyModel):
    """`ToyModel` whose decorator keeps the pre-norm last hidden state."""

    @capture_outputs(tie_last_hidden_states=False)
    def forward(self, x: torch.Tensor, **kwargs: Any) -> BaseModelOutput:
        return ToyModel.forward.__wrapped__(self, x, **kwargs)


@dataclass
class VisionOutput(ModelOutput):
    last_hidden_state: torch.Tensor | None = None
    vision_hidden_states: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None


class VisionToyModel(ToyModel):
    """`ToyModel` whose output also carries `vision_hidden_states`, which tie-last prefers."""

    @capture_outputs
    def forward(self, x: torch.Tensor, **kwargs: Any) -> VisionOutput:
        out = ToyModel.forward.__wrapped__(self, x, **kwargs)
        return VisionOutput(last_hidden_state=out.last_hidden_state, vision_hidden_states=out.last_hidden_state * 2)


def reference(model: ToyModel, x: torch.Tensor) -> dict[str, list[torch.Tensor]]:
    """Every intermediate tensor of `ToyModel`, computed by calling its submodules by hand."""
    states, attentions, cross = [model.embed(x)], [], []
    for layer in model.layers:
        h = states[-1]
        out, w = layer.attn(h)
        attentions.append(w)
        h = h + out
        out, w = layer.crossattention(h)
        cross.append(w)
        states.append(h + out)
    return {"hidden_states": states, "attentions": attentions, "cross_attentions": cross, "last": [model.norm(states[-1])]}


@pytest.fixture
def toy() -> ToyModel:
    torch.manual_seed(0)
    return ToyModel().eval()


@pytest.fixture
def x() -> torch.Tensor:
    return torch.randn(2, 5, DIM, generator=torch.Generator().manual_seed(3))


# Rule 1-2: output map, default index, recorder fields


def test_bare_class_records_index_0_for_hidden_states_and_whole_non_tuple_output(toy, x) -> None:
    ref = reference(toy, x)
    out = toy(x, output_hidden_states=True)
    assert_same(out.hidden_states, ref["hidden_states"][:-1] + ref["last"])


def test_bare_class_for_other_key_records_index_1(toy, x) -> None:
    toy._can_record_outputs = {"attentions": Attn}
    ref = reference(toy, x)
    out = toy(x, output_attentions=True)
    interleaved = [w for pair in zip(ref["attentions"], ref["cross_attentions"]) for w in pair]
    assert_same(out.attentions, interleaved)


def test_non_tuple_output_is_recorded_whole_whatever_the_index(toy, x) -> None:
    toy._can_record_outputs = {"layer_outputs": Layer}  # default index 1, but Layer returns a tensor
    out = toy(x, output_layer_outputs=True)
    assert_same(out["layer_outputs"], reference(toy, x)["hidden_states"][1:])


def test_layer_name_tells_self_from_cross_attention(toy, x) -> None:
    ref = reference(toy, x)
    out = toy(x, output_attentions=True)
    assert_same(out.attentions, ref["attentions"])
    assert_same(out["cross_attentions"], ref["cross_attentions"])


def test_class_name_matches_a_path_suffix_not_a_class_name(toy, x) -> None:
    toy._can_record_outputs = {"attentions": ".layers.1.attn"}
    assert_same(toy(x, output_attentions=True).attentions, reference(toy, x)["attentions"][1:])
    toy._can_record_outputs = {"attentions": "Attn"}
    assert toy(x, output_attentions=True).attentions == ()


def test_any_mapping_is_an_output_map(toy, x) -> None:
    toy._can_record_outputs = MappingProxyType({"hidden_states": Layer})
    assert len(toy(x, output_hidden_states=True).hidden_states) == len(toy.layers) + 1


def test_none_element_is_skipped_so_missing_weights_give_an_empty_tuple(x) -> None:
    torch.manual_seed(0)
    model = ToyModel(weights=False).eval()
    out = model(x, output_attentions=True)
    assert out.attentions == ()
    assert out["cross_attentions"] == ()


# Rule 3: flags


@pytest.mark.parametrize(
    ("kwarg", "config_value", "captured"),
    [(None, False, False), (None, True, True), (True, False, True), (False, True, False), (0, True, False), ([], True, False)],
)
def test_flag_comes_from_kwargs_then_config_then_false(x, kwarg, config_value, captured) -> None:
    torch.manual_seed(0)
    model = ToyModel(Config(num_hidden_layers=2, output_hidden_states=config_value)).eval()
    kwargs = {} if kwarg is None else {"output_hidden_states": kwarg}
    out = model(x, **kwargs)
    assert (out.hidden_states is not None) is captured
    if captured:
        assert len(out.hidden_states) == 3


def test_output_attentions_switches_cross_attentions_and_their_own_flag_is_ignored(toy, x) -> None:
    out = toy(x, output_cross_attentions=True)
    assert "cross_attentions" not in out and out.attentions is None
    out = toy(x, output_attentions=True, output_cross_attentions=False)
    assert_same(out["cross_attentions"], reference(toy, x)["cross_attentions"])


# Rule 4: hidden states


def test_initial_state_is_the_first_hooked_modules_input(toy, x) -> None:
    out = toy(x, output_hidden_states=True)
    assert len(out.hidden_states) == len(toy.layers) + 1
    assert torch.equal(out.hidden_states[0], toy.embed(x))


class KeywordToyModel(ToyModel):
    """`ToyModel` that passes each layer its input by keyword."""

    @capture_outputs
    def forward(self, x: torch.Tensor, **kwargs: Any) -> BaseModelOutput:
        x = self.embed(x)
        for layer in self.layers:
            x = layer(x=x)
        return BaseModelOutput(last_hidden_state=self.norm(x))


def test_initial_state_passed_by_keyword_is_captured(x) -> None:
    model = KeywordToyModel()
    out = model(x, output_hidden_states=True, output_attentions=True)
    assert len(out.hidden_states) == len(model.layers) + 1
    assert torch.equal(out.hidden_states[0], model.embed(x))
    assert len(out.attentions) == len(model.layers)


def test_capture_initial_hidden_state_false_gives_one_state_per_layer(toy, x) -> None:
    toy._can_record_outputs = {"hidden_states": OutputRecorder(Layer, capture_initial_hidden_state=False)}
    ref = reference(toy, x)
    assert_same(toy(x, output_hidden_states=True).hidden_states, ref["hidden_states"][1:-1] + ref["last"])


def test_last_state_is_tied_to_last_hidden_state(toy, x) -> None:
    out = toy(x, output_hidden_states=True)
    assert out.hidden_states[-1] is out.last_hidden_state


def test_tie_last_prefers_vision_hidden_states(x) -> None:
    torch.manual_seed(0)
    model = VisionToyModel().eval()
    out = model(x, output_hidden_states=True)
    assert out.hidden_states[-1] is out.vision_hidden_states
    assert not torch.equal(out.vision_hidden_states, out.last_hidden_state)


@pytest.mark.parametrize(
    ("model_class", "config_tie", "tied"),
    [(UntiedToyModel, None, False), (UntiedToyModel, True, True), (ToyModel, False, False), (ToyModel, None, True)],
)
def test_tie_last_off_by_decorator_or_config_and_config_wins(x, model_class, config_tie, tied) -> None:
    torch.manual_seed(0)
    model = model_class(Config(num_hidden_layers=2, tie_last_hidden_states=config_tie)).eval()
    ref = reference(model, x)
    out = model(x, output_hidden_states=True)
    assert_same(out.hidden_states, ref["hidden_states"][:-1] + (ref["last"] if tied else ref["hidden_states"][-1:]))


def test_last_state_not_tied_when_unselected(toy, x) -> None:
    out = toy(x, output_hidden_states=[0])
    assert out.hidden_states[-1] is None
    assert len(out.hidden_states) == 3


# Rule 5: index selection


@pytest.mark.parametrize(
    ("selection", "kept"),
    [(1, {1}), ([0, 2], {0, 2}), ([-1], {2}), ([0, -3], {0}), ([-4, 3, 7], set()), ((1, -2), {1})],
)
def test_hidden_state_selection_keeps_only_selected_positions(toy, x, selection, kept) -> None:
    ref = reference(toy, x)
    full = ref["hidden_states"][:-1] + ref["last"]
    out = toy(x, output_hidden_states=selection)
    assert_same(out.hidden_states, [t if i in kept else None for i, t in enumerate(full)])


def test_negative_selection_without_initial_state_counts_layers_only(toy, x) -> None:
    toy._can_record_outputs = {"hidden_states": OutputRecorder(Layer, capture_initial_hidden_state=False)}
    out = toy(x, output_hidden_states=[-2])
    assert_same(out.hidden_states, [reference(toy, x)["hidden_states"][1], None])


def test_negative_selection_reads_the_recorders_layer_count_key(x) -> None:
    torch.manual_seed(0)
    model = ToyModel(Config(num_hidden_layers=None, n_blocks=2)).eval()
    model._can_record_outputs = {"hidden_states": OutputRecorder(Layer, num_hidden_layers_key="n_blocks")}
    ref = reference(model, x)
    assert_same(model(x, output_hidden_states=-1).hidden_states, [None, None] + ref["last"])


def test_negative_selection_without_layer_count_is_a_clear_error(x) -> None:
    model = ToyModel(Config(num_hidden_layers=None)).eval()
    with pytest.raises(ValueError, match=r"negative indices \[-1\].*num_hidden_layers_key"):
        model(x, output_hidden_states=[-1])
    assert hook_count(model) == 0
    assert model(x, output_hidden_states=[0, 1]).hidden_states[2] is None


def test_recorder_layers_select_positions_of_other_keys(toy, x) -> None:
    toy._can_record_outputs = {"attentions": OutputRecorder(Attn, index=1, layer_name="attn", layers=(-1,))}
    assert_same(toy(x, output_attentions=True).attentions, [None, reference(toy, x)["attentions"][1]])


# Rule 6: composite models


class Inner(PreTrainedModel):
    """A nested model with its own map (hidden states only) and a decorated forward."""

    _can_record_outputs = {"hidden_states": Layer}

    def __init__(self) -> None:
        super().__init__(Config(num_hidden_layers=2))
        self.layers = nn.ModuleList(Layer() for _ in range(2))

    @capture_outputs(tie_last_hidden_states=False)
    def forward(self, x: torch.Tensor, **kwargs: Any) -> BaseModelOutput:
        for layer in self.layers:
            x = layer(x)
        return BaseModelOutput(last_hidden_state=x)


class UndecoratedInner(Inner):
    """The same nested model with a plain forward: its subtree records into the parent's collector."""

    def forward(self, x: torch.Tensor, **kwargs: Any) -> BaseModelOutput:
        return Inner.forward.__wrapped__(self, x, **kwargs)


@dataclass
class OuterOutput(ModelOutput):
    last_hidden_state: torch.Tensor | None = None
    inner_hidden_states: tuple[torch.Tensor, ...] | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


class Outer(PreTrainedModel):
    """A composite: its own `Layer` then a nested model; its map also lists `Attn` for attentions."""

    _can_record_outputs = {"hidden_states": Layer, "attentions": OutputRecorder(Attn, index=1)}

    def __init__(self, inner: type[Inner]) -> None:
        super().__init__(Config(num_hidden_layers=1))
        self.layer = Layer()
        self.inner = inner()

    @capture_outputs(tie_last_hidden_states=False)
    def forward(self, x: torch.Tensor, **kwargs: Any) -> OuterOutput:
        inner = self.inner(self.layer(x), **kwargs)
        return OuterOutput(last_hidden_state=inner.last_hidden_state, inner_hidden_states=inner.hidden_states)


def composite_reference(model: Outer, x: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(hidden states through the whole composite, the outer layer's two attention weights)."""
    states = [x, model.layer(x)]
    for layer in model.inner.layers:
        states.append(layer(states[-1]))
    out, self_weights = model.layer.attn(x)
    return states, [self_weights, model.layer.crossattention(x + out)[1]]


def test_nested_decorated_model_shadows_the_parents_collector(x) -> None:
    torch.manual_seed(0)
    model = Outer(Inner).eval()
    states, outer_weights = composite_reference(model, x)
    out = model(x, output_hidden_states=True, output_attentions=True)
    # The parent records its own region only; the nested forward records its subtree for itself.
    assert_same(out.hidden_states, states[:2])
    assert_same(out.inner_hidden_states, states[1:])
    # The nested map has no attentions, so the nested Attn modules record nothing anywhere.
    assert_same(out.attentions, outer_weights)
    model(x)  # a forward without capture removes the hooks held since the capturing one
    assert hook_count(model) == 0


def test_nested_map_governs_its_subtree_when_its_forward_is_plain(x) -> None:
    torch.manual_seed(0)
    model = Outer(UndecoratedInner).eval()
    states, outer_weights = composite_reference(model, x)
    out = model(x, output_hidden_states=True, output_attentions=True)
    assert_same(out.hidden_states, states)
    assert out.inner_hidden_states is None
    assert_same(out.attentions, outer_weights)


# Rule 7: injection and return_dict


@pytest.mark.parametrize("via_config", [False, True])
def test_return_dict_false_returns_to_tuple_without_none(x, via_config) -> None:
    torch.manual_seed(0)
    model = ToyModel(Config(num_hidden_layers=2, return_dict=not via_config)).eval()
    kwargs = {} if via_config else {"return_dict": False}
    ref = reference(model, x)
    plain = model(x, **kwargs)
    assert isinstance(plain, tuple) and len(plain) == 1 and torch.equal(plain[0], ref["last"][0])
    last, hidden = model(x, output_hidden_states=True, **kwargs)
    assert torch.equal(last, ref["last"][0])
    assert_same(hidden, ref["hidden_states"][:-1] + ref["last"])


# Rule 8 and "no cost when off": state after success and failure


class HookProbe(nn.Module):
    """Records how many hooks the model carries while its forward runs."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.models = [model]  # a list, so the model is not registered as a submodule
        self.seen: list[int] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(hook_count(self.models[0]))
        return x


def test_no_hook_exists_when_capture_is_off_and_none_remains_after(toy, x) -> None:
    probe = HookProbe(toy)
    toy.embed = nn.Sequential(toy.embed, probe)
    toy(x)
    toy(x, output_hidden_states=True, output_attentions=True)
    assert probe.seen[0] == 0
    assert probe.seen[1] > 0
    assert hook_count(toy) > 0  # held for the next capturing forward
    toy(x)
    assert probe.seen[2] == 0  # removed before the forward without capture runs
    assert hook_count(toy) == 0


def test_exception_mid_forward_leaves_no_state(toy, x) -> None:
    expected = toy(x, output_hidden_states=True, output_attentions=True)
    toy.layers[1].fail = True
    with pytest.raises(RuntimeError, match="on purpose"):
        toy(x, output_hidden_states=True, output_attentions=True)
    assert active_sessions() == ()
    release_hooks(toy)
    assert hook_count(toy) == 0
    toy.layers[1].fail = False
    again = toy(x, output_hidden_states=True, output_attentions=True)
    for key in ("hidden_states", "attentions", "cross_attentions"):
        assert_same(again[key], list(expected[key]))


# Capture options: references by default, copies only on request (`detach`, `to`, `dtype`)


FLAGS = {"output_hidden_states": True, "output_attentions": True}


@pytest.fixture
def untied() -> UntiedToyModel:
    # Every hidden state is a module's own tensor (no tie to the post-norm output).
    torch.manual_seed(0)
    return UntiedToyModel().eval()


def with_returned_tensors(model: ToyModel, x: torch.Tensor) -> tuple[Any, list[torch.Tensor], list[torch.Tensor]]:
    """The model's output under `FLAGS` and grad, with the tensors its embedding and layers (hidden
    states) and its self-attentions (weights) returned in that forward."""
    states: list[torch.Tensor] = []
    weights: list[torch.Tensor] = []
    handles = [model.embed.register_forward_hook(lambda m, a, o: states.append(o))]
    handles += [layer.register_forward_hook(lambda m, a, o: states.append(o)) for layer in model.layers]
    handles += [layer.attn.register_forward_hook(lambda m, a, o: weights.append(o[1])) for layer in model.layers]
    try:
        with torch.enable_grad():
            out = model(x, **FLAGS)
    finally:
        for handle in handles:
            handle.remove()
    return out, states, weights


def options_map(**options: Any) -> dict[str, OutputRecorder]:
    return {
        "hidden_states": OutputRecorder(Layer, **options),
        "attentions": OutputRecorder(Attn, index=1, layer_name="attn", **options),
    }


def test_captures_are_the_modules_own_tensors_by_default(toy, x) -> None:
    out, states, weights = with_returned_tensors(toy, x)
    expected_states = states[:-1] + [out.last_hidden_state]
    assert all(a is e for a, e in zip(out.hidden_states, expected_states, strict=True))
    assert all(a is e for a, e in zip(out.attentions, weights, strict=True))
    assert [t.data_ptr() for t in out.hidden_states] == [t.data_ptr() for t in expected_states]
    assert all(t.requires_grad and t.grad_fn is not None for t in out.hidden_states + out.attentions)


def test_detach_drops_the_graph_and_shares_the_storage(untied, x) -> None:
    untied._can_record_outputs = options_map(detach=True)
    out, states, weights = with_returned_tensors(untied, x)
    for captured, original in zip(out.hidden_states + out.attentions, states + weights, strict=True):
        assert original.requires_grad and not captured.requires_grad and captured.grad_fn is None
        assert captured.data_ptr() == original.data_ptr()
        assert torch.equal(captured, original)


@pytest.mark.parametrize("dtype", [torch.float16, "float16"])
def test_dtype_casts_every_kept_capture_including_the_initial_state(untied, x, dtype) -> None:
    reference_out = untied(x, **FLAGS)
    untied._can_record_outputs = options_map(dtype=dtype)
    out = untied(x, **FLAGS)
    for key in ("hidden_states", "attentions"):
        assert all(t.dtype == torch.float16 for t in out[key])
        assert_same(out[key], [t.half() for t in reference_out[key]])
    assert out.hidden_states[-1].requires_grad  # a cast without detach stays in the graph


def test_to_cpu_keeps_a_tensor_already_there_as_is(untied, x) -> None:
    untied._can_record_outputs = options_map(to="cpu")
    out, states, weights = with_returned_tensors(untied, x)
    assert all(a is e for a, e in zip(out.hidden_states + out.attentions, states + weights, strict=True))


def test_options_combine_and_skip_unselected_positions(untied, x) -> None:
    reference_out = untied(x, **FLAGS)
    recorder = OutputRecorder(Layer, layers=(0, -1), detach=True, to="cpu", dtype=torch.float16)
    untied._can_record_outputs = {"hidden_states": recorder}
    with torch.enable_grad():
        out = untied(x, output_hidden_states=True)
    assert out.hidden_states[1] is None
    kept = [out.hidden_states[0], out.hidden_states[2]]
    assert all(t.dtype == torch.float16 and t.device.type == "cpu" and not t.requires_grad for t in kept)
    assert_same(tuple(kept), [reference_out.hidden_states[0].half(), reference_out.hidden_states[2].half()])


def test_collector_transforms_kept_values_only() -> None:
    transformed: list[Any] = []

    def transform(value: Any) -> Any:
        transformed.append(value)
        return value

    states = [torch.full((1,), float(i)) for i in range(3)]
    collector = Collector(["hidden_states"], {"hidden_states": frozenset({1})})
    entries = (("hidden_states", 0, True, transform),)
    collector.record(".layers.0", entries, (states[0],), {}, states[1])
    collector.record(".layers.1", entries, (states[1],), {}, states[2])
    assert collector.lists["hidden_states"] == [None, states[1], None]
    assert len(transformed) == 1 and transformed[0] is states[1]


class Pair(nn.Module):
    """Returns a list (not a tuple), which is recorded whole."""

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return [x, x * 2]


class PairModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pair = Pair()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pair(x)[1]


def test_options_leave_values_that_are_not_tensors_as_they_are(x) -> None:
    model = PairModel()
    returned: list[Any] = []
    model.pair.register_forward_hook(lambda m, a, o: returned.append(o))
    with trace(model, {"pairs": OutputRecorder(Pair, detach=True, dtype=torch.float16)}) as captures:
        model(x)
    (captured,) = captures["pairs"]
    assert captured is returned[0]


def test_options_apply_through_trace(toy, x) -> None:
    reference_weights = toy(x, output_attentions=True).attentions
    recorder = OutputRecorder(Attn, index=1, layer_name="attn", detach=True, to="cpu", dtype=torch.float16)
    with torch.enable_grad(), trace(toy, {"attentions": recorder}) as captures:
        toy(x)
    assert all(t.dtype == torch.float16 and not t.requires_grad for t in captures["attentions"])
    assert_same(captures["attentions"], [t.half() for t in reference_weights])


def test_options_apply_to_the_tied_last_hidden_state(toy, x) -> None:
    reference = toy(x, **FLAGS)
    toy._can_record_outputs = options_map(detach=True, dtype=torch.float16)
    with torch.enable_grad():
        out = toy(x, **FLAGS)
    assert all(t.dtype == torch.float16 and not t.requires_grad for t in out.hidden_states)
    assert torch.equal(out.hidden_states[-1], reference.last_hidden_state.half())
    assert out.last_hidden_state.requires_grad and out.last_hidden_state.dtype == torch.float32
    with trace(toy) as captures, torch.enable_grad():
        toy(x)
    assert torch.equal(captures["hidden_states"][-1], reference.last_hidden_state.half())
    assert not captures["hidden_states"][-1].requires_grad
