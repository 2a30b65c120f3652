"""`tracing.stepwise`: one `trace` block read call by call (what `extract` runs its batches in) gives
each call exactly what a `trace` block around that call alone captures, and holds one call at a time."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from helpers import hook_count
from yamltrace import NeverRanWarning
from yamltrace.engine import OutputRecorder
from yamltrace.examples.tiny import TinyAttention, TinyDecoderLayer, TinyMLP
from yamltrace.tracing import stepwise, trace

SPEC = {
    "hidden_states": OutputRecorder(TinyDecoderLayer, index=0),
    "attentions": OutputRecorder(TinyAttention, index=1),
    "mlp_last": OutputRecorder(TinyMLP, index=0, layers=[-1]),
}


def _inputs(count: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    return [torch.randint(0, 128, (2, 3 + i), generator=generator) for i in range(count)]


def _alone(model: nn.Module, ids: torch.Tensor, spec=SPEC, **kwargs) -> dict[str, tuple]:
    with trace(model, spec, **kwargs) as captures:
        model(ids)
    return dict(captures)


def _equal(got: dict[str, tuple], expected: dict[str, tuple]) -> None:
    assert list(got) == list(expected)
    for key, values in expected.items():
        assert len(got[key]) == len(values), key
        for a, b in zip(got[key], values):
            assert (a is None and b is None) or torch.equal(a, b), key


@pytest.mark.parametrize("outputs", [None, ["hidden_states", "mlp_last"]])
def test_each_take_is_what_a_block_around_that_call_alone_captures(model, outputs) -> None:
    inputs = _inputs(4)
    expected = [_alone(model, ids, outputs=outputs) for ids in inputs]
    with torch.no_grad(), stepwise(model, SPEC, outputs=outputs) as steps:
        got = []
        for ids in inputs:
            model(ids)
            got.append(steps.take())
    for a, b in zip(got, expected):
        _equal(a, b)
    # (the tied last hidden state is the final norm's output, as in a block of its own)
    assert torch.equal(got[0]["hidden_states"][-1], model(inputs[0]).last_hidden_state)


def test_take_forgets_what_it_returned_so_the_block_holds_one_call(model) -> None:
    inputs = _inputs(2)
    with torch.no_grad(), stepwise(model, SPEC) as steps:
        model(inputs[0])
        first = steps.take()
        with pytest.warns(NeverRanWarning, match="no call of the .* finished since the last take"):
            assert steps.take() == {key: () for key in first}  # nothing since
        model(inputs[1])
        second = steps.take()
    assert [v.shape[1] for v in first["hidden_states"]] == [3] * 4
    assert [v.shape[1] for v in second["hidden_states"]] == [4] * 4


def test_two_calls_before_a_take_are_both_returned_and_skip_forgets_them(model) -> None:
    inputs = _inputs(3)
    with torch.no_grad(), stepwise(model, SPEC) as steps:
        model(inputs[0])
        model(inputs[1])
        both = steps.take()
        model(inputs[0])
        steps.skip()
        model(inputs[2])
        last = steps.take()
    assert len(both["hidden_states"]) == 8 and len(both["attentions"]) == 6
    _equal(last, _alone(model, inputs[2]))


def test_a_call_that_raised_leaves_nothing_for_the_next_take(model) -> None:
    inputs = _inputs(2)

    def fail(module: nn.Module, args: tuple) -> None:
        raise RuntimeError("failed on purpose")

    with torch.no_grad(), stepwise(model, SPEC) as steps:
        handle = model.layers[-1].register_forward_pre_hook(fail)  # after the other layers recorded
        with pytest.raises(RuntimeError, match="on purpose"):
            model(inputs[0])
        handle.remove()
        model(inputs[1])
        got = steps.take()
    _equal(got, _alone(model, inputs[1]))


def test_hooks_go_on_once_and_come_off_at_the_end(model) -> None:
    before = hook_count(model)
    with torch.no_grad(), stepwise(model, SPEC) as steps:
        hooks = {id(m): list(m._forward_hooks.values()) for m in model.modules()}
        for ids in _inputs(3):
            model(ids)
            steps.take()
            assert {id(m): list(m._forward_hooks.values()) for m in model.modules()} == hooks
    assert hook_count(model) == before
    assert all("forward" not in m.__dict__ for m in model.modules())


def test_an_output_that_recorded_no_tensor_warns_at_take(model) -> None:
    class Silent(nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, None]:
            return x, None

    wrapped = nn.Sequential(Silent())
    with torch.no_grad(), stepwise(wrapped, {"weights": OutputRecorder(Silent, index=1)}) as steps:
        wrapped(torch.ones(2, 3))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            taken = steps.take()
    assert taken == {"weights": ()}
    assert any("recorded no tensor" in str(w.message) for w in caught)
