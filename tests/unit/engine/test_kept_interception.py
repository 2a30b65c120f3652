"""A `trace` run kept for its plan installs each module's interceptor again for every block
(`_intercept.Prepared`): what changed on the model between two blocks (a forward hook, an instance
`forward`, the class's forward) is what the second block sees, as a fresh plan's block would, and
the modules' `__dict__` are exactly as before after each block."""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch
from helpers import assert_same
from torch import nn

from yamltrace.engine import forget_plans
from yamltrace.engine._intercept import OUTPUTS, intercept
from yamltrace.engine._prepared import Prepared
from yamltrace.examples.tiny import TinyAttention, TinyDecoderLayer, TinyModel
from yamltrace.tracing import trace

SPEC = {"hidden_states": TinyDecoderLayer, "attentions": TinyAttention}


def captured(model: nn.Module, ids: torch.Tensor, spec: Any = SPEC) -> dict[str, Any]:
    with torch.no_grad(), trace(model, spec) as captures:
        model(ids)
    return {key: captures[key] for key in captures} | {"paths": {key: captures.paths(key) for key in captures}}


def fresh(model: nn.Module, ids: torch.Tensor, spec: Any = SPEC) -> dict[str, Any]:
    forget_plans(model)
    return captured(model, ids, spec)


def dicts(model: nn.Module) -> dict[str, dict[str, Any]]:
    return {name: {k: v for k, v in vars(m).items() if k != "_yamltrace_trace_plans"} for name, m in model.named_modules()}


def doubled(module: nn.Module, args: Any, output: Any) -> Any:
    return (output[0] * 2, *output[1:]) if isinstance(output, tuple) else output * 2


def test_blocks_on_a_kept_run_leave_every_modules_dict_as_it_was(model, ids) -> None:
    before = dicts(model)
    first = captured(model, ids)
    assert dicts(model) == before
    assert_same(captured(model, ids), first)
    assert dicts(model) == before


@pytest.mark.parametrize("spec", [SPEC, None], ids=["dict", "model"])
def test_a_forward_hook_added_between_blocks_is_seen(model, ids, spec) -> None:
    plain = captured(model, ids, spec)
    handle = model.layers[1].register_forward_hook(doubled)
    second = captured(model, ids, spec)
    assert torch.equal(second["hidden_states"][2], plain["hidden_states"][2] * 2)  # after the hook, as a capture sees
    assert_same(second, fresh(model, ids, spec))
    handle.remove()
    assert_same(captured(model, ids, spec), plain)


def test_an_instance_forward_set_between_blocks_is_called(model, ids) -> None:
    plain = captured(model, ids)
    layer = model.layers[0]
    own = functools.partial(type(layer).forward, layer)

    def forward(*args: Any, **kwargs: Any) -> Any:
        return doubled(layer, args, own(*args, **kwargs))

    layer.forward = forward
    second = captured(model, ids)
    assert torch.equal(second["hidden_states"][1], plain["hidden_states"][1] * 2)
    assert_same(second, fresh(model, ids))
    assert layer.__dict__["forward"] is forward
    del layer.forward
    assert_same(captured(model, ids), plain)


def test_the_classs_forward_replaced_between_blocks_is_called(model, ids, monkeypatch) -> None:
    plain = captured(model, ids)
    original = TinyAttention.forward

    def forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
        output = original(self, *args, **kwargs)
        return (output[0], output[1] * 0)

    monkeypatch.setattr(TinyAttention, "forward", forward)
    second = captured(model, ids)
    assert all(not a.any() for a in second["attentions"]) and any(a.any() for a in plain["attentions"])
    assert_same(second, fresh(model, ids))


def test_the_classs_forward_replaced_while_an_instance_forward_shadowed_it_is_called_once_that_is_gone(
    model, ids, monkeypatch
) -> None:
    # The block with the instance `forward` binds the new class forward again (it changed); the block after
    # it, the class forward unchanged since, must call that class forward, not the instance's.
    plain = captured(model, ids)
    layer, original = model.layers[0], TinyDecoderLayer.forward

    def tripled(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
        output = original(self, *args, **kwargs)
        return (output[0] * 3, *output[1:]) if isinstance(output, tuple) else output * 3

    own = functools.partial(original, layer)
    layer.forward = lambda *args, **kwargs: doubled(layer, args, own(*args, **kwargs))
    monkeypatch.setattr(TinyDecoderLayer, "forward", tripled)
    shadowed = captured(model, ids)
    assert torch.equal(shadowed["hidden_states"][1], plain["hidden_states"][1] * 2)
    del layer.forward
    second = captured(model, ids)
    assert torch.equal(second["hidden_states"][1], plain["hidden_states"][1] * 3)
    assert_same(second, fresh(model, ids))


def test_others_joining_and_leaving_during_a_block_leave_the_next_block_as_a_fresh_one(model, ids) -> None:
    before, log = dicts(model), []
    with torch.no_grad(), trace(model, SPEC) as first:
        other = intercept([(model.layers[1], lambda *call: log.append(call), None)])
        model(ids)
        other.remove()
    assert dicts(model) == before and len(log) == 1 and len(first["hidden_states"]) == 4
    second = captured(model, ids)
    assert len(log) == 1 and dicts(model) == before
    assert_same(second, fresh(model, ids))


def test_interceptors_others_joined_during_a_block_stay_theirs_and_the_next_block_records(model, ids) -> None:
    before, log = dicts(model), []
    with torch.no_grad(), trace(model, SPEC) as first:
        other = intercept([(model.layers[0], lambda *call: log.append(call), None)])
        model(ids)
    model(ids)  # the other interception still listens; the block's listeners are gone
    assert len(log) == 2 and len(first["hidden_states"]) == 4
    second = captured(model, ids)
    assert len(log) == 3
    assert_same(second, fresh(model, ids))
    other.remove()
    assert dicts(model) == before
    assert_same(captured(model, ids), second)


def test_a_wrapper_set_over_the_interceptor_during_a_block_keeps_working(model, ids) -> None:
    layer, calls = model.layers[2], []
    with torch.no_grad(), trace(model, SPEC):
        inner = layer.forward

        @functools.wraps(inner)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls.append(1)
            return inner(*args, **kwargs)

        layer.forward = wrapper
        model(ids)
    model(ids)
    assert len(calls) == 2 and layer.__dict__["forward"] is wrapper
    second = captured(model, ids)
    assert len(calls) == 3 and len(second["hidden_states"]) == 4
    assert_same(second, fresh(model, ids))


class Scale(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


def test_prepared_installs_again_and_again_and_restores_the_dict() -> None:
    module, log = Scale(), []
    before = dict(module.__dict__)
    prepared = Prepared([(module, lambda context, args, kwargs, output: log.append((context, output)), "ctx")], [])
    for n in range(1, 4):
        prepared.install()
        module(torch.ones(1))
        prepared.remove()
        prepared.remove()  # idempotent
        assert module.__dict__ == before and len(log) == n and log[-1][0] == "ctx"
    module(torch.ones(1))
    assert len(log) == 3


def test_prepared_on_a_module_with_forward_hooks_listens_after_them() -> None:
    module, log = Scale(), []
    handle = module.register_forward_hook(lambda m, args, output: output + 1)
    prepared = Prepared([(module, lambda context, args, kwargs, output: log.append(output), None)], [])
    prepared.install()
    assert torch.equal(module(torch.ones(1)), torch.tensor([3.0])) and torch.equal(log[0], torch.tensor([3.0]))
    prepared.remove()
    assert "forward" not in module.__dict__ and len(module._forward_hooks) == 1
    handle.remove()
    prepared.install()
    module(torch.ones(1))
    prepared.remove()
    assert torch.equal(log[1], torch.tensor([2.0])) and "forward" not in module.__dict__


def test_an_edit_others_put_on_an_interceptor_during_a_block_stays_theirs(model, ids) -> None:
    plain, before = captured(model, ids), dicts(model)
    with torch.no_grad(), trace(model, SPEC):
        edit = intercept([], [], [(model.layers[0], OUTPUTS, lambda output: doubled(None, None, output))])
    edited = captured(model, ids)
    assert torch.equal(edited["hidden_states"][1], plain["hidden_states"][1] * 2)
    assert_same(edited, fresh(model, ids))
    edit.remove()
    assert dicts(model) == before
    assert_same(captured(model, ids), plain)


def test_a_class_forward_decorated_with_another_tie_last_setting_between_blocks_is_seen(model, ids, monkeypatch) -> None:
    import inspect

    from yamltrace.capture import capture_outputs

    tied = captured(model, ids, None)
    monkeypatch.setattr(TinyModel, "forward", capture_outputs(tie_last_hidden_states=False)(inspect.unwrap(TinyModel.forward)))
    untied = captured(model, ids, None)
    assert not torch.equal(tied["hidden_states"][-1], untied["hidden_states"][-1])
    assert_same(untied, fresh(model, ids, None))
