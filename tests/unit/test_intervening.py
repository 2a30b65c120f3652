"""`intervene`: every operation x selector equals the same edit written as plain torch hooks; order,
composition with `trace`, context-locality, nothing left after the block, errors, gradients."""

from __future__ import annotations

import threading

import pytest
import torch
from torch import nn

import yamltrace
from helpers import hook_count
from yamltrace import OutputRecorder, Spec, SpecError
from yamltrace.engine import Intervention, RuntimeValue
from yamltrace.examples.tiny import TinyAttention, TinyConfig, TinyDecoderLayer, TinyModel

HEADS, HIDDEN = 4, 32


@pytest.fixture
def model() -> TinyModel:
    torch.manual_seed(0)
    return TinyModel(TinyConfig(num_hidden_layers=3, hidden_size=HIDDEN, num_attention_heads=HEADS)).eval()


@pytest.fixture
def ids() -> torch.Tensor:
    return torch.randint(0, 128, (2, 7), generator=torch.Generator().manual_seed(1))


def reference(t: torch.Tensor, operation: str, value, positions=None, heads=None) -> torch.Tensor:
    """The edit written by hand: a copy, edited in place through advanced indexing."""
    out = t.clone()
    view = out.unflatten(-1, (HEADS, -1)) if heads else out
    index = (slice(None), list(positions) if positions else slice(None))
    index = index + ((list(heads),) if heads else ())
    region = view[index]
    if isinstance(value, torch.Tensor) and value.shape == t.shape and (positions or heads):
        value = (value.unflatten(-1, (HEADS, -1)) if heads else value)[index]
    edited = {
        "zero": lambda r: torch.zeros_like(r),
        "add": lambda r: r + value,
        "set": lambda r: torch.zeros_like(r) + value,
        "scale": lambda r: r * value,
        "clamp": lambda r: r.clamp(*value),
    }[operation](region)
    view[index] = edited
    return out


VALUES = {"zero": None, "add": 0.25, "set": -1.5, "scale": 3.0, "clamp": (-0.05, 0.1)}
SELECTORS = {  # name -> (recorder fields, positions, heads)
    "whole": ({}, None, None),
    "positions": ({"positions": (1, -2)}, (1, -2), None),
    "slice": ({"positions": "2:5"}, (2, 3, 4), None),
    "heads": ({}, None, (0, 2)),
    "positions and heads": ({"positions": (3,)}, (3,), (1,)),
}


def by_hooks(model, ids, path, operation, value, positions, heads, input=False):
    """The model's output with the edit done by a plain forward (pre-)hook on the module at `path`."""
    module = model.get_submodule(path)
    if input:
        handle = module.register_forward_pre_hook(lambda m, args: (reference(args[0], operation, value, positions, heads),))
    else:

        def hook(m, args, output):
            if isinstance(output, tuple):
                return (reference(output[0], operation, value, positions, heads), *output[1:])
            return reference(output, operation, value, positions, heads)

        handle = module.register_forward_hook(hook)
    try:
        return model(ids).last_hidden_state
    finally:
        handle.remove()


def spec_of(*interventions: Intervention) -> Spec:
    return Spec(outputs={}, interventions=interventions)


@pytest.mark.parametrize("selector", SELECTORS)
@pytest.mark.parametrize("operation", VALUES)
@pytest.mark.parametrize("where", ["layer output", "attention output (tuple element 0)", "o_proj input"])
def test_each_operation_and_selector_equals_plain_hooks(model, ids, operation, selector, where) -> None:
    fields, positions, heads = SELECTORS[selector]
    target, layer, extra, path = {
        "layer output": (TinyDecoderLayer, 1, {}, "layers.1"),
        "attention output (tuple element 0)": (TinyAttention, 2, {"index": 0}, "layers.2.self_attn"),
        "o_proj input": (nn.Linear, 0, {"input": 0, "layer_name": "o_proj"}, "layers.0.self_attn.o_proj"),
    }[where]
    select = OutputRecorder(target, layers=(layer,), **fields, **extra)
    iv = Intervention("edit", select, operation, VALUES[operation], heads=heads)
    with torch.no_grad():
        with yamltrace.intervene(model, spec_of(iv)) as edited:
            ours = model(ids).last_hidden_state
        plain = model(ids).last_hidden_state
        theirs = by_hooks(model, ids, path, operation, VALUES[operation], positions, heads, input="input" in extra)
    assert edited["edit"] == (path,)
    assert not torch.equal(ours, plain) and torch.equal(ours, theirs)
    assert hook_count(model) == 0


@pytest.mark.parametrize(
    "value",
    {
        "vector": tuple(float(i) for i in range(HIDDEN)),
        "tensor": torch.linspace(-1, 1, HIDDEN),
        "full shape (another run's)": torch.randn(2, 7, HIDDEN),
        "one per batch row and position": torch.randn(2, 2, HIDDEN),
    }.items(),
    ids=lambda item: item[0],
)
@pytest.mark.parametrize("operation", ["add", "set"])
def test_vector_and_tensor_values_at_positions_equal_plain_hooks(model, ids, operation, value) -> None:
    name, value = value
    iv = Intervention("steer", OutputRecorder(TinyDecoderLayer, layers=(0,), positions=(1, 4)), operation, value)
    tensor = torch.tensor(value) if isinstance(value, tuple) else value
    with torch.no_grad():
        with yamltrace.intervene(model, spec_of(iv)):
            ours = model(ids).last_hidden_state
        theirs = by_hooks(model, ids, "layers.0", operation, tensor, (1, 4), None)
    assert torch.equal(ours, theirs)


def test_a_value_for_one_position_may_leave_the_sequence_dimension_out(model, ids) -> None:
    value = torch.randn(2, HIDDEN)
    iv = Intervention("patch", OutputRecorder(TinyDecoderLayer, layers=(2,), positions=(4,)), "set", RuntimeValue("clean"))
    with torch.no_grad():
        with yamltrace.intervene(model, spec_of(iv), values={"clean": value}):
            ours = model(ids).last_hidden_state
        theirs = by_hooks(model, ids, "layers.2", "set", value[:, None], (4,), None)
    assert torch.equal(ours, theirs)


def test_runtime_values_one_per_module_in_module_order(model, ids) -> None:
    vectors = [torch.full((HIDDEN,), float(i)) for i in range(3)]
    iv = Intervention("steer", OutputRecorder(TinyDecoderLayer), "add", RuntimeValue("v"))
    hooks = [
        m.register_forward_hook(lambda m, a, o, v=v: o + v)
        for m, v in zip(model.layers, vectors)  # type: ignore[misc]
    ]
    with torch.no_grad():
        theirs = model(ids).last_hidden_state
        for h in hooks:
            h.remove()
        with yamltrace.intervene(model, spec_of(iv), values={"v": vectors}) as edited:
            ours = model(ids).last_hidden_state
    assert edited["steer"] == ("layers.0", "layers.1", "layers.2")
    assert torch.equal(ours, theirs)


def test_interventions_apply_in_declaration_order(model, ids) -> None:
    select = OutputRecorder(TinyDecoderLayer, layers=(0,))
    first, second = Intervention("add", select, "add", 1.0), Intervention("scale", select, "scale", 2.0)
    with torch.no_grad():
        with yamltrace.intervene(model, spec_of(first, second)):
            add_then_scale = model(ids).last_hidden_state
        with yamltrace.intervene(model, spec_of(second, first)):
            scale_then_add = model(ids).last_hidden_state
        hook = model.layers[0].register_forward_hook(lambda m, a, o: (o + 1.0) * 2.0)
        theirs = model(ids).last_hidden_state
        hook.remove()
    assert torch.equal(add_then_scale, theirs) and not torch.equal(scale_then_add, theirs)


def test_trace_with_interventions_applies_them_and_captures_the_edited_values(model, ids) -> None:
    iv = Intervention("ablate", OutputRecorder(TinyDecoderLayer, layers=(1,)), "zero")
    spec = Spec(outputs={"hidden_states": TinyDecoderLayer}, interventions=[iv])
    with torch.no_grad(), yamltrace.trace(model, spec) as captures:
        output = model(ids).last_hidden_state
    states = captures["hidden_states"]
    assert torch.equal(states[2], torch.zeros_like(states[2]))  # layer 1's output, as the next layer got it
    assert torch.equal(states[-1], output)
    assert hook_count(model) == 0


def test_captures_of_an_intervene_block_inside_a_trace_see_the_edit(model, ids) -> None:
    iv = Intervention("double", OutputRecorder(TinyAttention, index=0), "scale", 2.0)
    with torch.no_grad():
        with yamltrace.trace(model, {"attn": OutputRecorder(TinyAttention, index=0)}) as plain:
            model(ids)
        with yamltrace.trace(model, {"attn": OutputRecorder(TinyAttention, index=0)}) as edited:
            with yamltrace.intervene(model, spec_of(iv)):
                model(ids)
    assert torch.equal(edited["attn"][0], plain["attn"][0] * 2.0)


def test_edits_hold_only_in_the_context_that_entered_the_block(model, ids) -> None:
    iv = Intervention("ablate", OutputRecorder(TinyDecoderLayer), "zero")
    with torch.no_grad():
        plain = model(ids).last_hidden_state
        other: list[torch.Tensor] = []
        with yamltrace.intervene(model, spec_of(iv)):
            thread = threading.Thread(target=lambda: other.append(model(ids).last_hidden_state))
            thread.start()
            thread.join()
            ours = model(ids).last_hidden_state
        after = model(ids).last_hidden_state
    assert torch.equal(other[0], plain) and not torch.equal(ours, plain) and torch.equal(after, plain)


def test_nothing_remains_after_a_block_that_raised(model, ids) -> None:
    iv = Intervention("ablate", OutputRecorder(TinyDecoderLayer), "zero")
    with pytest.raises(RuntimeError, match="on purpose"), yamltrace.intervene(model, spec_of(iv)):
        assert hook_count(model) > 0
        raise RuntimeError("on purpose")
    assert hook_count(model) == 0


def test_apply_interventions_edits_every_call_until_removed_twice_safely(model, ids) -> None:
    iv = Intervention("ablate", OutputRecorder(TinyDecoderLayer, layers=(-1,)), "zero")
    with torch.no_grad():
        plain = model(ids).last_hidden_state
        handle = yamltrace.apply_interventions(model, spec_of(iv))
        other: list[torch.Tensor] = []
        thread = threading.Thread(target=lambda: other.append(model(ids).last_hidden_state))
        thread.start()
        thread.join()
        assert handle.paths == {"ablate": ("layers.2",)}
        assert torch.equal(other[0], model(ids).last_hidden_state) and not torch.equal(other[0], plain)
        handle.remove()
        handle.remove()
        assert torch.equal(model(ids).last_hidden_state, plain) and hook_count(model) == 0


def test_gradients_reach_a_runtime_value_that_requires_grad(model, ids) -> None:
    steer = torch.zeros(HIDDEN, requires_grad=True)
    iv = Intervention("steer", OutputRecorder(TinyDecoderLayer, layers=(1,), positions=(-1,)), "add", RuntimeValue("v"))
    with yamltrace.intervene(model, spec_of(iv), values={"v": steer}):
        model(ids).last_hidden_state[:, -1].sum().backward()
        assert steer.grad is not None and steer.grad.abs().sum() > 0
        first = steer.grad.clone()
        model(ids).last_hidden_state[:, -1].sum().backward()  # a second forward has a graph of its own
    assert torch.allclose(steer.grad, 2 * first)


def test_a_value_that_does_not_fit_the_selection_is_a_located_error_at_the_call(model, ids) -> None:
    where = yamltrace.SpecIssue("", "$.interventions.steer", "steer.yaml", 12, 5)
    iv = Intervention("steer", OutputRecorder(TinyDecoderLayer, positions=(1, 2)), "add", RuntimeValue("v"), where=where)
    with yamltrace.intervene(model, spec_of(iv), values={"v": torch.ones(7)}):  # (seq,): not along the last dim
        with pytest.raises(SpecError, match=r"steer\.yaml:12:5: \$\.interventions\.steer: .*shape \(7,\).*\(2, 2, 32\)"):
            model(ids)
    assert hook_count(model) == 0


@pytest.mark.parametrize(
    "iv, values, message",
    [
        (Intervention("x", OutputRecorder(nn.Conv1d), "zero"), None, "selects no module of TinyModel"),
        (Intervention("x", OutputRecorder(TinyDecoderLayer), "add", RuntimeValue("v")), None, r"pass values=\{'v'"),
        (
            Intervention("x", OutputRecorder(TinyDecoderLayer), "add", RuntimeValue("v")),
            {"v": [torch.ones(1)]},
            "holds 1 tensors for the 3 modules",
        ),
        (Intervention("x", OutputRecorder(TinyDecoderLayer), "zero"), {"w": torch.ones(1)}, "no intervention takes"),
    ],
)
def test_plan_errors_are_located_and_install_nothing(model, iv, values, message) -> None:
    with pytest.raises(SpecError, match=message), yamltrace.intervene(model, spec_of(iv), values=values):
        pass  # pragma: no cover
    assert hook_count(model) == 0


def test_an_intervention_matching_nothing_warns_with_strict_false(model, ids) -> None:
    with (
        pytest.warns(UserWarning, match="selects no module"),
        yamltrace.intervene(model, spec_of(Intervention("x", OutputRecorder(nn.Conv1d), "zero")), strict=False) as edited,
    ):
        model(ids)
    assert dict(edited) == {}


def test_head_dim_splits_the_last_dimension_as_the_config_head_count_does(model, ids) -> None:
    select = OutputRecorder(TinyDecoderLayer, layers=(1,), positions=(2,))
    by_count = Intervention("ablate", select, "zero", heads=(3,))
    by_dim = Intervention("ablate", select, "zero", heads=(3,), head_dim=HIDDEN // HEADS)
    with torch.no_grad():
        with yamltrace.intervene(model, spec_of(by_count)):
            counted = model(ids).last_hidden_state
        with yamltrace.intervene(model, spec_of(by_dim)):
            sized = model(ids).last_hidden_state
        theirs = by_hooks(model, ids, "layers.1", "zero", None, (2,), (3,))
    assert torch.equal(counted, theirs) and torch.equal(sized, theirs)


def test_trace_refuses_values_that_no_intervention_takes(model, ids) -> None:
    with pytest.raises(SpecError, match="no intervention takes"), yamltrace.trace(model, values={"v": torch.ones(1)}):
        pass  # pragma: no cover
    assert hook_count(model) == 0


def test_clamp_without_bounds_is_a_located_error(model) -> None:
    iv = Intervention("cap", OutputRecorder(TinyDecoderLayer), "clamp", (None, None))
    with (
        pytest.raises(SpecError, match=r"\$\.interventions\.cap: .*clamp takes \[low, high\]"),
        yamltrace.intervene(model, spec_of(iv)),
    ):
        pass  # pragma: no cover


def test_a_value_of_another_dtype_is_cast_to_the_edited_tensors(model, ids) -> None:
    vector = torch.linspace(-1, 1, HIDDEN, dtype=torch.float64)
    iv = Intervention("steer", OutputRecorder(TinyDecoderLayer, layers=(0,)), "add", vector)
    with torch.no_grad():
        with yamltrace.intervene(model, spec_of(iv)):
            ours = model(ids).last_hidden_state
            again = model(ids).last_hidden_state
        theirs = by_hooks(model, ids, "layers.0", "add", vector.float(), None, None)
    assert ours.dtype == torch.float32 and torch.equal(ours, theirs) and torch.equal(again, theirs)


@pytest.mark.parametrize("how", ["intervene", "apply_interventions"])
def test_a_meta_tensor_value_is_a_located_error_before_anything_is_installed(model, how) -> None:
    spec = {"yamltrace": 1, "interventions": {"s": {"class_name": "norm", "add": {"value": "v"}}}}
    values = {"v": torch.zeros(32, device="meta")}
    with pytest.raises(SpecError, match=r"\$\.interventions\.s: values\['v'\] is a tensor on the meta device"):
        if how == "intervene":
            with yamltrace.intervene(model, spec, values=values):
                pass
        else:
            yamltrace.apply_interventions(model, spec, values)
    assert hook_count(model) == 0
