"""Wrappers a capture sees through: DataParallel, torch.compile, activation checkpointing (paths unchanged).

DistributedDataParallel and FSDP need a process group: tests/integration/test_ddp.py runs them in two
processes.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
    CheckpointImpl,
    apply_activation_checkpointing,
    checkpoint_wrapper,
)

from helpers import assert_same, hook_count
from yamltrace.engine import OutputRecorder, unwrap
from yamltrace.engine import logical_path
from yamltrace.examples.tiny import TinyConfig, TinyDecoderLayer, TinyModel
from yamltrace.tracing import trace


class Plain(nn.Module):
    """A model with a capture map and no decorated forward (the case `trace(ddp_model)` refused)."""

    _can_record_outputs = {"hidden_states": "layers.1", "mlp": OutputRecorder(nn.Linear, layer_name="mlp")}

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))
        self.mlp = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.mlp(x)


def tiny() -> TinyModel:
    torch.manual_seed(0)
    return TinyModel(TinyConfig()).eval()


def checkpointed(model: TinyModel, impl: CheckpointImpl) -> TinyModel:
    """A copy of `model` whose decoder layers are wrapped for activation checkpointing."""
    wrapped = copy.deepcopy(model)
    apply_activation_checkpointing(
        wrapped,
        checkpoint_wrapper_fn=lambda m: checkpoint_wrapper(m, checkpoint_impl=impl),
        check_fn=lambda m: isinstance(m, TinyDecoderLayer),
    )
    assert "layers.0._checkpoint_wrapped_module" in dict(wrapped.named_modules())
    return wrapped


IDS = torch.tensor([[1, 5, 9, 2, 7], [3, 3, 8, 0, 4]])
IMPLS = [CheckpointImpl.NO_REENTRANT, CheckpointImpl.REENTRANT]


def test_unwrap_sees_through_a_chain_of_wrappers() -> None:
    model = Plain()
    wrapped = nn.DataParallel(checkpoint_wrapper(model))
    assert unwrap(wrapped) is model
    assert unwrap(model) is model
    assert logical_path(wrapped, "module._checkpoint_wrapped_module.layers.1") == "layers.1"
    # A child named like a wrapped attribute is kept when its parent is no wrapper.
    holder = nn.Module()
    holder.module = model
    assert unwrap(holder) is holder
    assert logical_path(holder, "module.layers.1") == "module.layers.1"


def test_trace_sees_through_data_parallel_to_a_plain_model() -> None:
    model = Plain()
    x = torch.randn(2, 4)
    with trace(model) as expected:
        model(x)
    wrapped = nn.DataParallel(model)
    with trace(wrapped) as captures:
        wrapped(x)
    assert dict(captures) and len(captures["hidden_states"]) == 2
    assert_same(dict(captures), dict(expected))
    assert captures.paths("hidden_states") == expected.paths("hidden_states") == ("layers.1:input", "layers.1")
    assert captures.paths("mlp") == ("mlp",)
    assert hook_count(wrapped) == 0


def test_trace_of_a_wrapped_decorated_model_keeps_the_model_paths() -> None:
    model = tiny()
    with trace(model) as expected:
        model(IDS)
    wrapped = nn.DataParallel(model)
    with trace(wrapped) as captures:
        wrapped(IDS)
    assert_same(dict(captures), dict(expected))
    assert captures.paths("attentions") == expected.paths("attentions")
    assert captures.paths("attentions")[0] == "layers.0.self_attn"
    assert len(captures.steps) == 1


def test_compiled_wrapper_is_unwrapped_without_compiling() -> None:
    model = Plain()
    compiled = torch.compile(model, backend="eager")
    assert unwrap(compiled) is model
    assert logical_path(compiled, "_orig_mod.layers.1") == "layers.1"


@pytest.mark.parametrize("impl", IMPLS, ids=lambda i: i.name)
def test_checkpoint_wrapped_layers_capture_the_same_tensors(impl: CheckpointImpl) -> None:
    model = tiny()
    wrapped = checkpointed(model, impl)
    expected = model(IDS, output_hidden_states=True, output_attentions=True)
    # The decorator (capture_outputs) and trace both see the wrapped layers' modules.
    output = wrapped(IDS, output_hidden_states=True, output_attentions=True)
    assert len(output.attentions) == 4
    assert_same(output.hidden_states, expected.hidden_states)
    assert_same(output.attentions, expected.attentions)
    with trace(wrapped) as captures:
        wrapped(IDS)
    assert_same(captures["hidden_states"], expected.hidden_states)
    assert_same(captures["attentions"], expected.attentions)
    assert captures.paths("attentions")[1] == "layers.1.self_attn"
    assert hook_count(wrapped) == 0


@pytest.mark.parametrize("impl", IMPLS, ids=lambda i: i.name)
def test_recomputation_in_backward_records_nothing(impl: CheckpointImpl) -> None:
    wrapped = checkpointed(tiny(), impl).train()
    with trace(wrapped) as captures:
        output = wrapped(IDS)
        counts = {key: len(values) for key, values in captures.items()}
        output.last_hidden_state.sum().backward()
        assert {key: len(values) for key, values in captures.items()} == counts == {"hidden_states": 5, "attentions": 4}
    assert wrapped.layers[0]._checkpoint_wrapped_module.self_attn.q_proj.weight.grad is not None
    out = wrapped(IDS, output_hidden_states=True)
    out.last_hidden_state.sum().backward()
    assert len(out.hidden_states) == 5


@pytest.mark.parametrize(
    "recorder",
    [
        OutputRecorder(class_name="layers.1.self_attn", index=0),
        OutputRecorder(class_name="self_attn", layer_name="layers.2", index=0),
        OutputRecorder(nn.Linear, layer_name="layers.3.mlp.down_proj"),
        OutputRecorder(class_name="layers.1", index=0),  # the wrapper and its wrapped layer: recorded once
    ],
    ids=["class_name", "layer_name", "layer_name-class", "wrapped-path"],
)
def test_paths_match_the_same_modules_through_wrappers(recorder: OutputRecorder) -> None:
    model = tiny()
    with trace(model, {"x": recorder}) as expected:
        model(IDS)
    assert len(expected["x"]) == 1
    for wrapped in (checkpointed(model, CheckpointImpl.NO_REENTRANT), nn.DataParallel(model)):
        # A strict trace: a recorder matching no module would raise SpecError.
        with trace(wrapped, {"x": recorder}) as captures:
            wrapped(IDS)
        assert_same(captures["x"], expected["x"])
        assert captures.paths("x") == expected.paths("x")


def test_a_wrapper_is_never_hooked_itself() -> None:
    model = tiny()
    wrapped = checkpointed(model, CheckpointImpl.NO_REENTRANT)
    with trace(wrapped, {"x": OutputRecorder(nn.Module, layer_name="layers.0", index=0)}) as captures:
        wrapped(IDS)
    with trace(model, {"x": OutputRecorder(nn.Module, layer_name="layers.0", index=0)}) as expected:
        model(IDS)
    assert captures.paths("x") == expected.paths("x")
    assert_same(captures["x"], expected["x"])
