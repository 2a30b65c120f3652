"""`trace()`: capture on any module, key selection, steps, read-only results, contexts and failures."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import torch
from torch import nn

from helpers import assert_same, hook_count
from yamltrace.capture import capture_outputs
from yamltrace.modeling import Config
from yamltrace.modeling import merge_with_config_defaults
from yamltrace.engine import OutputRecorder
from yamltrace.examples.tiny import TinyAttention, TinyConfig, TinyDecoderLayer, TinyModel
from yamltrace.engine import active_sessions
from yamltrace.tracing import trace


class Flaky(nn.Module):
    """Identity that raises while `fail` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.fail = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fail:
            raise RuntimeError("failed on purpose")
        return x


@pytest.fixture
def seq() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4), Flaky(), nn.Linear(4, 2))


@pytest.fixture
def x() -> torch.Tensor:
    return torch.randn(3, 4, generator=torch.Generator().manual_seed(2))


def linear_outputs(seq: nn.Sequential, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    a = seq[0](x)
    b = seq[2](seq[1](a))
    return a, b, seq[4](b)


def test_trace_matches_the_models_own_outputs(tiny, input_ids) -> None:
    own = tiny(input_ids, output_hidden_states=True, output_attentions=True)
    with trace(tiny) as captures:
        tiny(input_ids)
    assert set(captures) == {"hidden_states", "attentions"}
    assert_same(captures["hidden_states"], own.hidden_states)
    assert_same(captures["attentions"], own.attentions)
    assert hook_count(tiny) == 0


def test_plain_sequential_with_a_dict_spec(seq, x) -> None:
    with trace(seq, {"hidden_states": nn.Linear, "relu": OutputRecorder(nn.ReLU, index=0)}) as captures:
        out = seq(x)
    a, b, c = linear_outputs(seq, x)
    assert torch.equal(out, c)
    # Initial state is the first Linear's input; no tie-last since the root returns a bare tensor.
    assert_same(captures["hidden_states"], (x, a, b, c))
    assert_same(captures["relu"], (seq[1](a),))
    assert hook_count(seq) == 0


def test_model_without_a_map_needs_a_spec(seq) -> None:
    with pytest.raises(ValueError, match="Sequential declares no _can_record_outputs; pass trace"):
        with trace(seq):
            pass
    assert hook_count(seq) == 0


def test_outputs_selects_keys(tiny, input_ids) -> None:
    own = tiny(input_ids, output_attentions=True)
    with trace(tiny, outputs="attentions") as captures:
        tiny(input_ids)
    assert list(captures) == ["attentions"]
    assert_same(captures["attentions"], own.attentions)
    with trace(tiny, outputs=["hidden_states", "attentions"]) as captures:
        tiny(input_ids)
    assert list(captures) == ["hidden_states", "attentions"]


def test_unknown_output_key_is_refused_with_a_suggestion(tiny) -> None:
    with pytest.raises(KeyError, match=r"'attention' is not in the spec .*did you mean 'attentions'\?"):
        with trace(tiny, outputs=["attention"]):
            pass
    assert hook_count(tiny) == 0


def test_reading_an_untraced_key_suggests_the_close_one(tiny, input_ids) -> None:
    with trace(tiny, outputs=["attentions"]) as captures:
        tiny(input_ids)
    with pytest.raises(KeyError, match=r"'attention' was not traced; traced keys: \['attentions'\]; did you mean"):
        captures["attention"]
    with pytest.raises(KeyError, match=r"'hidden_states' was not traced; traced keys: \['attentions'\]") as error:
        captures["hidden_states"]
    assert "did you mean" not in str(error.value)


def test_each_call_is_a_step_and_captures_concatenate(tiny, input_ids) -> None:
    other = input_ids.flip(0)
    first = tiny(input_ids, output_hidden_states=True, output_attentions=True)
    second = tiny(other, output_hidden_states=True, output_attentions=True)
    with trace(tiny) as captures:
        tiny(input_ids)
        tiny(other)
    assert len(captures.steps) == 2
    for step, own in zip(captures.steps, (first, second)):
        assert_same(step["hidden_states"], own.hidden_states)
        assert_same(step["attentions"], own.attentions)
    assert_same(captures["attentions"], first.attentions + second.attentions)
    assert len(captures["hidden_states"]) == 2 * (tiny.config.num_hidden_layers + 1)


def test_captures_are_read_only(tiny, input_ids) -> None:
    with trace(tiny) as captures:
        tiny(input_ids)
    with pytest.raises(TypeError):
        captures["attentions"] = ()  # type: ignore[index]
    with pytest.raises(TypeError):
        captures.steps[0]["attentions"] = ()  # type: ignore[index]
    assert isinstance(captures["attentions"], tuple)


def test_failed_step_is_discarded_and_state_is_clean(seq, x) -> None:
    with trace(seq, {"hidden_states": nn.Linear}) as captures:
        seq(x)
        seq[3].fail = True
        with pytest.raises(RuntimeError, match="on purpose"):
            seq(x * 2)
        seq[3].fail = False
        seq(x * 3)
    assert len(captures.steps) == 2
    assert_same(captures.steps[0]["hidden_states"], (x, *linear_outputs(seq, x)))
    assert_same(captures.steps[1]["hidden_states"], (x * 3, *linear_outputs(seq, x * 3)))
    assert hook_count(seq) == 0
    assert active_sessions() == ()


def test_exception_in_the_block_removes_hooks(tiny, input_ids) -> None:
    with pytest.raises(RuntimeError, match="inside"):
        with trace(tiny):
            tiny(input_ids)
            raise RuntimeError("inside the block")
    assert hook_count(tiny) == 0
    assert active_sessions() == ()
    with trace(tiny) as captures:
        tiny(input_ids)
    assert len(captures.steps) == 1


def test_records_only_calls_from_the_entering_context(tiny, input_ids) -> None:
    with trace(tiny) as captures:
        thread = threading.Thread(target=tiny, args=(input_ids,))
        thread.start()
        thread.join()
        assert len(captures.steps) == 0
        tiny(input_ids)
    assert len(captures.steps) == 1


def test_recorder_layers_negative_without_config_counts_hooked_modules(seq, x) -> None:
    spec = {"linears": OutputRecorder(nn.Linear, layers=(-1, 0))}
    with trace(seq, spec) as captures:
        seq(x)
    a, _, c = linear_outputs(seq, x)
    assert_same(captures["linears"], (a, None, c))


def _untied_forward() -> Any:
    raw = TinyModel.forward.__wrapped__.__wrapped__  # under merge_with_config_defaults and capture_outputs
    return merge_with_config_defaults(capture_outputs(raw, tie_last_hidden_states=False))


class UntiedTiny(TinyModel):
    forward = _untied_forward()


@pytest.mark.parametrize(("config_tie", "tied"), [(None, False), (True, True)])
def test_trace_follows_the_decorators_tie_last_unless_config_sets_it(input_ids, config_tie, tied) -> None:
    torch.manual_seed(0)
    model = UntiedTiny(TinyConfig(tie_last_hidden_states=config_tie)).eval()
    own = model(input_ids, output_hidden_states=True)
    with trace(model, outputs="hidden_states") as captures:
        model(input_ids)
    assert_same(captures["hidden_states"], own.hidden_states)
    assert torch.equal(captures["hidden_states"][-1], own.last_hidden_state) is tied


def test_nested_traces_both_record(tiny, input_ids) -> None:
    with trace(tiny, outputs="attentions") as outer:
        with trace(tiny, {"layers": TinyDecoderLayer, "attn": TinyAttention}) as inner:
            tiny(input_ids)
        tiny(input_ids)
    assert len(outer.steps) == 2 and len(inner.steps) == 1
    assert_same(inner["attn"], outer.steps[0]["attentions"])
    assert len(inner["layers"]) == tiny.config.num_hidden_layers


def test_trace_and_capture_outputs_do_not_interfere(tiny, input_ids) -> None:
    with trace(tiny, outputs="attentions") as captures:
        own = tiny(input_ids, output_hidden_states=True)
    assert own.attentions is None and len(own.hidden_states) == tiny.config.num_hidden_layers + 1
    assert len(captures["attentions"]) == tiny.config.num_hidden_layers
    assert Config().output_attentions is False


class Pair(nn.Module):
    """Returns a tuple of two: its input and its input doubled."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x, 2 * x


@pytest.mark.parametrize("key", ["hidden_states", "attentions"])
@pytest.mark.parametrize("detach", [False, True])  # the common listener, and the general one
def test_an_index_past_a_tuple_output_names_the_module_and_the_fix(key: str, detach: bool, x) -> None:
    model = nn.Sequential(nn.Linear(4, 4), Pair())
    with pytest.raises(
        IndexError,
        match=r"output '.*' records element 2 of the output of module \.1, which returned a tuple of 2\. Fix the recorder's index",
    ):
        with trace(model, {key: OutputRecorder(Pair, index=2, detach=detach)}):
            model(x)
    assert hook_count(model) == 0
    with trace(model, {key: OutputRecorder(Pair, index=-1, detach=detach)}) as captures:
        model(x)
    assert torch.equal(captures[key][-1], 2 * model[0](x))
