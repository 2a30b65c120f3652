"""trace under torch.compile(fullgraph=True): hooks installed before compilation, no ContextVar read
while dynamo traces them, the same tensors as eager. `backend="eager"` keeps it fast; the graphs and
graph breaks are dynamo's either way."""

from __future__ import annotations

import pytest
import torch

from yamltrace.recorder import OutputRecorder
from yamltrace.tiny import TinyConfig, TinyDecoderLayer, TinyModel
from yamltrace.tracing import trace


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _same(got: tuple, expected: tuple) -> bool:
    return len(got) == len(expected) and all(torch.equal(a, b) for a, b in zip(got, expected))


def test_fullgraph_trace_equals_eager_and_keeps_steps_apart(tiny: TinyModel, input_ids) -> None:
    with torch.no_grad():
        with trace(tiny) as eager:
            tiny(input_ids)
        compiled = torch.compile(tiny, backend="eager", fullgraph=True)
        with trace(tiny) as captures:
            compiled(input_ids)
            compiled(input_ids.flip(1))
        compiled(input_ids)  # after the block: recorded nowhere
    assert len(captures.steps) == 2
    for key in ("hidden_states", "attentions"):
        assert _same(captures.steps[0][key], eager[key])
        assert len(captures[key]) == 2 * len(eager[key])
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in tiny.modules())


def test_fullgraph_trace_of_a_decorated_model_with_layer_selection(input_ids) -> None:
    torch.manual_seed(0)
    model = TinyModel(TinyConfig(num_hidden_layers=3)).eval()
    spec = {"hidden_states": OutputRecorder(TinyDecoderLayer, layers=(0, -1))}
    with torch.no_grad():
        own = model(input_ids, output_hidden_states=[0, -1]).hidden_states
        with trace(model, spec) as captures:
            torch.compile(model, backend="eager", fullgraph=True)(input_ids)
    assert [t is None for t in captures["hidden_states"]] == [False, True, True, False]
    assert torch.equal(captures["hidden_states"][0], own[0]) and torch.equal(captures["hidden_states"][-1], own[-1])


@pytest.mark.oracle
def test_fullgraph_trace_of_transformers_llama_equals_its_own_outputs(input_ids) -> None:
    from _oracle import tiny_llama_config
    from transformers import LlamaModel

    torch.manual_seed(0)
    model = LlamaModel(tiny_llama_config()).eval()
    input_ids = input_ids % model.config.vocab_size
    with torch.no_grad():
        own = model(input_ids, output_hidden_states=True, output_attentions=True)
        with trace(model) as captures:
            torch.compile(model, backend="eager", fullgraph=True)(input_ids)
    assert _same(captures["hidden_states"], own.hidden_states)
    assert _same(captures["attentions"], own.attentions)
