"""trace under torch.compile(fullgraph=True): hooks installed before compilation, no ContextVar read
while dynamo traces them, the same tensors as eager. `backend="eager"` keeps it fast; the graphs and
graph breaks are dynamo's either way."""

from __future__ import annotations

import warnings

import pytest
import torch

from helpers import assert_same, hook_count
from yamltrace import NeverRanWarning
from yamltrace.engine import OutputRecorder
from yamltrace.examples.tiny import TinyConfig, TinyDecoderLayer, TinyModel
from yamltrace.tracing import trace

pytestmark = pytest.mark.slow  # compiles


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


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
        assert_same(captures.steps[0][key], eager[key])
        assert len(captures[key]) == 2 * len(eager[key])
    assert hook_count(tiny) == 0


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
    from helpers_transformers import tiny_llama_config
    from transformers import LlamaModel

    torch.manual_seed(0)
    model = LlamaModel(tiny_llama_config()).eval()
    input_ids = input_ids % model.config.vocab_size
    with torch.no_grad():
        own = model(input_ids, output_hidden_states=True, output_attentions=True)
        with trace(model) as captures:
            torch.compile(model, backend="eager", fullgraph=True)(input_ids)
    assert_same(captures["hidden_states"], own.hidden_states)
    assert_same(captures["attentions"], own.attentions)


def test_a_model_compiled_and_called_before_the_block_is_captured_without_recompiling_per_block(
    tiny: TinyModel, input_ids
) -> None:
    from torch._dynamo.utils import counters

    # Code compiled before the block ran no hooks; torch guards on hooks added later only with its
    # hook guards on (docs/capture.md, "torch.compile").
    with torch.no_grad(), torch._dynamo.config.patch(skip_nnmodule_hook_guards=False):
        with trace(tiny) as eager:
            tiny(input_ids)
        compiled = torch.compile(tiny, backend="eager", fullgraph=True)
        compiled(input_ids)
        graphs = []
        for _ in range(3):
            with trace(tiny) as captures:
                compiled(input_ids)
            graphs.append(counters["stats"]["unique_graphs"])
            for key in ("hidden_states", "attentions"):
                assert_same(captures[key], eager[key])
        compiled(input_ids)
    # One graph without the hooks, one with them: later blocks reuse it.
    assert graphs[0] == graphs[1] == graphs[2]
    assert hook_count(tiny) == 0


def test_trace_accepts_the_module_torch_compile_returned(tiny: TinyModel, input_ids) -> None:
    with torch.no_grad(), torch._dynamo.config.patch(skip_nnmodule_hook_guards=False):
        with trace(tiny) as eager:
            tiny(input_ids)
        compiled = torch.compile(tiny, backend="eager")
        compiled(input_ids)
        with trace(compiled) as captures:
            compiled(input_ids)
            compiled(input_ids)
    assert len(captures.steps) == 2
    for key in ("hidden_states", "attentions"):
        assert_same(captures.steps[1][key], eager[key])
    assert hook_count(tiny) == 0


def test_trace_of_a_compiled_model_follows_its_decorator_tie_last_argument(input_ids) -> None:
    import inspect

    from yamltrace.capture import capture_outputs

    class PreNormLast(TinyModel):
        forward = capture_outputs(tie_last_hidden_states=False)(inspect.unwrap(TinyModel.forward))

    torch.manual_seed(0)
    model = PreNormLast(TinyConfig(num_hidden_layers=2)).eval()
    with torch.no_grad():
        own = model(input_ids, output_hidden_states=True)
        compiled = torch.compile(model, backend="eager")
        with trace(compiled) as captures:
            compiled(input_ids)
    assert not torch.equal(own.hidden_states[-1], own.last_hidden_state)
    assert_same(captures["hidden_states"], own.hidden_states)


def test_decorator_capture_compiles_with_graph_breaks_and_refuses_fullgraph_naming_trace(input_ids) -> None:
    torch.manual_seed(0)
    model = TinyModel(TinyConfig(num_hidden_layers=2)).eval()
    flags = {"output_hidden_states": True, "output_attentions": True}
    with torch.no_grad():
        eager = model(input_ids, **flags)
        compiled = torch.compile(model, backend="eager")(input_ids, **flags)
        for key in ("hidden_states", "attentions"):
            assert_same(compiled[key], eager[key])
        torch._dynamo.reset()
        with pytest.raises(torch._dynamo.exc.Unsupported, match=r"yamltrace\.trace\(model\)"):
            torch.compile(model, backend="eager", fullgraph=True)(input_ids, **flags)
        # Capture off compiles whole, and trace captures the same model under fullgraph.
        torch._dynamo.reset()
        fullgraph = torch.compile(model, backend="eager", fullgraph=True)
        assert torch.equal(fullgraph(input_ids).last_hidden_state, eager.last_hidden_state)
        with trace(model) as captures:
            fullgraph(input_ids)
    assert_same(captures["hidden_states"], eager.hidden_states)


@pytest.mark.parametrize("fullgraph", [True, False], ids=["fullgraph", "graph-breaks"])
@pytest.mark.parametrize("given", ["model", "wrapper"])
def test_a_block_whose_calls_ran_code_compiled_before_it_records_each_key_whole_or_says_it_is_empty(
    input_ids, fullgraph: bool, given: str
) -> None:
    # torch's default hook guards: whether code compiled before the block runs the hooks the block
    # adds depends on what dynamo guarded (it differs by module and torch version), so the promise is
    # per key: everything eager records, or nothing and a NeverRanWarning naming the key.
    torch.manual_seed(0)
    tiny = TinyModel(TinyConfig()).eval()
    spec = {"hidden_states": TinyDecoderLayer, "first": "layers.0"}
    with torch.no_grad():
        with trace(tiny, spec) as eager:
            tiny(input_ids)
        compiled = torch.compile(tiny, backend="eager", fullgraph=fullgraph)
        compiled(input_ids)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with trace(tiny if given == "model" else compiled, spec) as captures:
                compiled(input_ids)
    said = " ".join(str(w.message) for w in caught if issubclass(w.category, NeverRanWarning))
    for key in spec:
        if captures[key]:
            assert_same(captures[key], eager[key])
        else:
            assert f"{key!r} (" in said, (key, said)
    assert hook_count(tiny) == 0
