"""The listener of a recorder that only keeps positions records exactly what `Collector.record` does."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from yamltrace import CaptureError
from yamltrace.engine import OutputRecorder
from yamltrace.engine._collector import Collector, HookRow, Sessions, entry_of, hook_listeners
from yamltrace.engine._session import Session, forward_context
from yamltrace.examples.tiny import TinyDecoderLayer
from yamltrace.tracing import trace


def state(collector: Collector) -> tuple:
    lists = {
        k: [None if v is None else v.tolist() if isinstance(v, torch.Tensor) else v for v in vs]
        for k, vs in collector.lists.items()
    }
    return lists, collector.paths, collector.silent, collector.last_transform


def run(key: str, recorder: OutputRecorder, calls: list, selections=None, specialised: bool = True):
    """The listener `install_hooks` would pick for one module, and `Collector.record` itself, fed the
    same calls: the final state of each, or the error each raised."""
    entries = (entry_of(key, recorder),)
    results = []
    for use_listener in (True, False):
        collector = Collector([key], selections)
        session = Session(collector, block=False)
        ((_, listener, _),) = hook_listeners(
            [HookRow(nn.Identity(), ".layers.0", entries)], Sessions(forward_context(), (session,))
        )
        if use_listener:
            assert (listener.__name__ == "selected") == specialised
        token = session.enter()  # the innermost decorated forward: the listener records
        try:
            for args, output in calls:
                if use_listener:
                    listener(None, args, {}, output)
                else:
                    collector.record(".layers.0", entries, args, {}, output)
        except CaptureError as e:
            results.append(str(e))
        else:
            results.append(state(collector))
        finally:
            session.exit(token)
    return results


x = torch.arange(2 * 5 * 3, dtype=torch.float32).reshape(2, 5, 3)
CALLS = {
    "tuples": [((x,), (x * 2, None)), ((x,), (x * 3, x))],
    "a None element": [((x,), (None, x)), ((x,), (x, x))],
    "a plain tensor": [((x,), x)],
    "a plain None": [((x,), None), ((x,), x)],
    "a short tuple": [((x,), (x,)), ((x,), ())],
    "a sequence too short": [((x,), (x[:, :1],))],
    "not a tensor": [((x,), ("text", x))],
}


@pytest.mark.parametrize("calls", CALLS.values(), ids=CALLS.keys())
@pytest.mark.parametrize("key", ["hidden_states", "attentions"])
@pytest.mark.parametrize("positions", [[-1], "-2:", [0, -1], "::2", "1:3"], ids=str)
def test_the_selection_listener_records_what_record_does(calls, key, positions) -> None:
    recorder = OutputRecorder(TinyDecoderLayer, index=0, positions=positions)
    by_listener, by_record = run(key, recorder, calls)
    assert by_listener == by_record


def test_layers_selections_go_through_record() -> None:
    recorder = OutputRecorder(TinyDecoderLayer, index=0, positions=[-1])
    calls = [((x,), (x,)), ((x,), (x * 2,)), ((x,), (x * 3,))]
    by_listener, by_record = run("hidden_states", recorder, calls, selections={"hidden_states": frozenset({0, 2})})
    assert by_listener == by_record
    assert by_listener[0]["hidden_states"][1] is None


@pytest.mark.parametrize(
    "fields", [{"positions": [-1], "detach": True}, {"positions": [-1], "dtype": torch.float64}, {"detach": True}], ids=str
)
def test_other_transforms_keep_the_general_listener(fields) -> None:
    run("attentions", OutputRecorder(TinyDecoderLayer, index=0, **fields), [((x,), (x,))], specialised=False)


def test_a_trace_with_positions_equals_the_same_selection_made_through_record(tiny, input_ids) -> None:
    every_layer = tuple(range(tiny.config.num_hidden_layers))  # keeps all, but through record
    spec = {
        "fast": OutputRecorder(TinyDecoderLayer, index=0, positions="-2:"),
        "general": OutputRecorder(TinyDecoderLayer, index=0, positions="-2:", layers=every_layer),
    }
    with trace(tiny, spec) as captures:
        out = tiny(input_ids)
    assert captures.paths("fast") == captures.paths("general")
    assert len(captures["fast"]) == tiny.config.num_hidden_layers
    for a, b in zip(captures["fast"], captures["general"]):
        assert torch.equal(a, b)
    hidden = {"hidden_states": OutputRecorder(TinyDecoderLayer, index=0, positions="-2:")}
    with trace(tiny, hidden) as captures:
        out = tiny(input_ids)
    assert torch.equal(captures["hidden_states"][0], tiny.embed_tokens(input_ids)[:, -2:])
    assert torch.equal(captures["hidden_states"][-1], out.last_hidden_state[:, -2:])
