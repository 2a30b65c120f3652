"""Interventions where models run: torch.compile (fullgraph, as `trace`), wrappers, held hooks,
`generate` (every step edited), and foreign forward hooks (captures record what the caller gets)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import apply_activation_checkpointing

import yamltrace
from helpers import hook_count
from yamltrace import OutputRecorder, Spec
from yamltrace.engine import Intervention, RuntimeValue
from yamltrace.examples.tiny import TinyDecoderLayer, TinyModel

pytestmark = pytest.mark.slow  # torch.compile, generate and wrappers


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def steer_spec(**fields) -> Spec:
    select = OutputRecorder(TinyDecoderLayer, layers=(1,), positions=(-1,))
    return Spec(
        outputs={"hidden_states": TinyDecoderLayer},
        interventions=[
            Intervention("steer", select, "add", RuntimeValue("v")),
            Intervention("cap", OutputRecorder(TinyDecoderLayer), "clamp", (-2.0, 2.0)),
        ],
        **fields,
    )


def test_fullgraph_compile_edits_and_captures_as_eager(tiny: TinyModel, input_ids) -> None:
    values = {"v": torch.linspace(-3, 3, 32)}
    # Hooks come and go around the compiled code: torch follows them with its hook guards on
    # (docs/capture.md, "torch.compile").
    with torch.no_grad(), torch._dynamo.config.patch(skip_nnmodule_hook_guards=False):
        with yamltrace.trace(tiny, steer_spec(), values=values) as eager:
            expected = tiny(input_ids).last_hidden_state
        compiled = torch.compile(tiny, backend="eager", fullgraph=True)
        with yamltrace.trace(tiny, steer_spec(), values=values) as captures:
            got = compiled(input_ids).last_hidden_state
        plain = compiled(input_ids).last_hidden_state  # after the block: not edited
        with yamltrace.intervene(tiny, steer_spec(), values=values):
            again = compiled(input_ids).last_hidden_state
    assert torch.equal(got, expected) and torch.equal(again, expected) and not torch.equal(plain, expected)
    for a, b in zip(captures["hidden_states"], eager["hidden_states"], strict=True):
        assert torch.equal(a, b)
    assert hook_count(tiny) == 0


def test_edits_see_through_wrappers_and_keep_held_hooks_working(tiny: TinyModel, input_ids) -> None:
    values = {"v": torch.ones(32)}
    with torch.no_grad():
        with yamltrace.intervene(tiny, steer_spec(), values=values):
            expected = tiny(input_ids, output_hidden_states=True)  # the decorator's held hooks record the edit
        wrapped = nn.DataParallel(tiny)
        with yamltrace.intervene(wrapped, steer_spec(), values=values) as edited:
            got = wrapped(input_ids).last_hidden_state
        apply_activation_checkpointing(tiny)
        with yamltrace.intervene(tiny, steer_spec(), values=values):
            checkpointed = tiny(input_ids).last_hidden_state
    yamltrace.release_hooks(tiny)
    assert edited["steer"] == ("layers.1",)
    assert torch.equal(got, expected.last_hidden_state) and torch.equal(checkpointed, got)
    assert torch.equal(expected.hidden_states[2][:, :-1].clamp(-2, 2), expected.hidden_states[2][:, :-1])
    assert hook_count(tiny) == 0


def test_captures_record_what_a_foreign_forward_hook_returned(tiny: TinyModel, input_ids) -> None:
    steering = tiny.layers[0].register_forward_hook(lambda m, args, output: output + 1.0)
    with (
        torch.no_grad(),
        yamltrace.trace(
            tiny, {"hidden_states": TinyDecoderLayer, "inputs": OutputRecorder(TinyDecoderLayer, input=0)}
        ) as captures,
    ):
        tiny(input_ids)
    steering.remove()
    states, inputs = captures["hidden_states"], captures["inputs"]
    assert torch.equal(states[1], inputs[1])  # layer 0's output is what layer 1 received
    assert list(tiny.layers[0]._forward_hooks) == [] and hook_count(tiny) == 0


def test_a_decorated_capture_records_what_a_foreign_hook_returned(tiny: TinyModel, input_ids) -> None:
    steering = tiny.layers[1].register_forward_hook(lambda m, args, output: output * 0.0)
    with torch.no_grad():
        states = tiny(input_ids, output_hidden_states=True).hidden_states
    steering.remove()
    yamltrace.release_hooks(tiny)
    assert torch.equal(states[2], torch.zeros_like(states[2]))


@pytest.mark.oracle
def test_generate_edits_every_step_as_a_plain_hook_does() -> None:
    from helpers_transformers import tiny_llama_config
    from transformers import LlamaForCausalLM
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    torch.manual_seed(0)
    model = LlamaForCausalLM(tiny_llama_config()).eval()
    prompt = torch.randint(0, model.config.vocab_size, (1, 5))
    vector = torch.randn(32) * 4
    select = OutputRecorder(LlamaDecoderLayer, index=0, layers=(0,), positions=(-1,))
    spec = Spec(outputs={}, interventions=[Intervention("steer", select, "add", vector)])

    def hook(module, args, output):
        hidden = output[0] if isinstance(output, tuple) else output
        hidden = torch.cat([hidden[:, :-1], hidden[:, -1:] + vector], dim=1)
        return (hidden, *output[1:]) if isinstance(output, tuple) else hidden

    options = {"max_new_tokens": 6, "do_sample": False, "output_scores": True, "return_dict_in_generate": True}
    with torch.no_grad():
        plain = model.generate(prompt, **options)
        handle = model.model.layers[0].register_forward_hook(hook)
        theirs = model.generate(prompt, **options)
        handle.remove()
        with yamltrace.intervene(model, spec):
            ours = model.generate(prompt, **options)
    assert torch.equal(ours.sequences, theirs.sequences)
    assert all(torch.equal(a, b) for a, b in zip(ours.scores, theirs.scores, strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(plain.scores, theirs.scores, strict=True))
    assert hook_count(model) == 0


def test_held_hooks_follow_a_foreign_hook_added_between_capturing_forwards(tiny: TinyModel, input_ids) -> None:
    with torch.no_grad():
        tiny(input_ids, output_hidden_states=True)  # hooks held from here
        steering = tiny.layers[1].register_forward_hook(lambda m, args, output: output * 0.0)
        states = tiny(input_ids, output_hidden_states=True).hidden_states
        steering.remove()
        after = tiny(input_ids, output_hidden_states=True).hidden_states
    yamltrace.release_hooks(tiny)
    assert torch.equal(states[2], torch.zeros_like(states[2])) and not torch.equal(after[2], states[2])
    assert hook_count(tiny) == 0


def test_dynamic_shape_compile_edits_each_length_as_eager(tiny: TinyModel, input_ids) -> None:
    values = {"v": torch.linspace(-3, 3, 32)}
    compiled = torch.compile(tiny, backend="eager", dynamic=True)
    with torch.no_grad():
        for length in (7, 5, 6):
            batch = input_ids[:, :length]
            with yamltrace.intervene(tiny, steer_spec(), values=values):
                expected = tiny(batch).last_hidden_state
                got = compiled(batch).last_hidden_state
            assert torch.equal(got, expected)
    assert hook_count(tiny) == 0


@pytest.mark.parametrize("dynamic", [False, True])
def test_fullgraph_compile_of_whole_tensor_edits_equals_eager(tiny: TinyModel, input_ids, dynamic) -> None:
    # Add and scale of the whole output by a vector or a number: the edits that call the torch op directly.
    vector = torch.linspace(-1, 1, 32, dtype=torch.float64)  # converted to the outputs' dtype at the first call
    spec = Spec(
        outputs={"hidden_states": TinyDecoderLayer},
        interventions=[
            Intervention("steer", OutputRecorder(TinyDecoderLayer, layers=(0,)), "add", RuntimeValue("v")),
            Intervention("gain", OutputRecorder(TinyDecoderLayer, layers=(1,)), "scale", RuntimeValue("s")),
            Intervention("shift", OutputRecorder(TinyDecoderLayer, layers=(-1,)), "add", 0.5),
        ],
    )
    values = {"v": vector, "s": torch.linspace(0.5, 2, 32)}
    with torch.no_grad():
        with yamltrace.trace(tiny, spec, values=values) as eager:
            expected = tiny(input_ids).last_hidden_state
        compiled = torch.compile(tiny, backend="eager", fullgraph=True, dynamic=dynamic)
        for _ in range(2):
            with yamltrace.trace(tiny, spec, values=values) as captures:
                got = compiled(input_ids).last_hidden_state
            assert torch.equal(got, expected)
            for a, b in zip(captures["hidden_states"], eager["hidden_states"], strict=True):
                assert torch.equal(a, b)
        assert not torch.equal(compiled(input_ids).last_hidden_state, expected)  # after the blocks: not edited
    assert hook_count(tiny) == 0


def test_the_last_hidden_state_ties_to_what_a_foreign_hook_on_the_model_returned(tiny: TinyModel, input_ids) -> None:
    # The tie point's frame exits with the output after the user's forward hook on it, as the caller gets it.
    def halve(module, args, output):
        output.last_hidden_state = output.last_hidden_state * 0.5
        return output

    handle = tiny.register_forward_hook(halve)
    try:
        with torch.no_grad(), yamltrace.trace(tiny, outputs=["hidden_states"]) as captures:
            received = tiny(input_ids).last_hidden_state
    finally:
        handle.remove()
    assert torch.equal(captures["hidden_states"][-1], received)
    assert list(tiny._forward_hooks) == [] and hook_count(tiny) == 0
