"""The listeners' copies, guarded: every listener kind, behind either gate (`Sessions` of decorated
forwards, a `trace` scope's `ScopeGate`), fed every output shape, with and without a layer
selection, ends in exactly the state `Collector.record` reaches (or raises the same error), and
records nothing while its gate is closed. A change to one copy of the gate or of what a hook
records fails here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from yamltrace.engine._intercept import Interception, _interceptor_of
from yamltrace import CaptureError
from yamltrace.engine import OutputRecorder
from yamltrace.engine._collector import Collector, HookRow, Sessions, entry_of, hook_listeners, install_hooks
from yamltrace.engine._session import Session, forward_context
from yamltrace.examples.tiny import TinyDecoderLayer

KINDS = {  # listener name -> (key, recorder); `install_hooks` picks that listener for the one entry
    "hidden_states": ("hidden_states", OutputRecorder(TinyDecoderLayer, index=0)),
    "other": ("attentions", OutputRecorder(TinyDecoderLayer, index=1)),
    "selected": ("hidden_states", OutputRecorder(TinyDecoderLayer, index=0, positions=[-1])),
    "selected other": ("attentions", OutputRecorder(TinyDecoderLayer, index=1, positions="-2:")),
    "general": ("hidden_states", OutputRecorder(TinyDecoderLayer, index=0, detach=True)),
    "general other": ("attentions", OutputRecorder(TinyDecoderLayer, index=1, dtype=torch.float64)),
    "general input": ("attentions", OutputRecorder(TinyDecoderLayer, input=0)),
}
x = torch.arange(2 * 5 * 3, dtype=torch.float32).reshape(2, 5, 3)
SHAPES: dict[str, Callable[[int], Any]] = {  # the output of the n-th call
    "tuple": lambda n: (x * n, x * (n + 1)),
    "non-tuple": lambda n: x * n,
    "None": lambda n: None,
    "None element": lambda n: (None, x * n) if n % 2 else (x * n, None),
    "short tuple": lambda n: (x * n,),
}
SELECTIONS = {"none": None, "first kept": frozenset({0}), "second kept": frozenset({1})}


def state(collector: Collector) -> tuple:
    lists = {
        k: [None if v is None else v.tolist() if isinstance(v, torch.Tensor) else v for v in vs]
        for k, vs in collector.lists.items()
    }
    # A key without a transform reads None from `last_transform` whether or not it was written.
    transforms = {k: t for k, t in collector.last_transform.items() if t is not None}
    return lists, collector.paths, collector.silent, transforms


class Gate:
    """One gate kind: what a listener serves, and how to open and close it."""

    def __init__(self, kind: str, collector: Collector) -> None:
        self.kind = kind
        if kind == "Sessions":
            self.session = Session(collector, block=False)
            self.served: Any = Sessions(forward_context(), (Session(Collector(collector.lists), block=False), self.session))
        else:
            self.session = Session(Collector(()), block=True)
            self.served = self.session.scope_gate(2, collector)

    def open(self) -> Any:
        token = self.session.enter()
        if self.kind == "ScopeGate":
            self.session.push_scope(2)
        return token

    def shadowed(self, call: Callable[[], None]) -> None:
        """Call while the gate is shut by a nested scope or decorated forward (it must not record)."""
        if self.kind == "ScopeGate":
            self.session.push_scope(5)
            call()
            self.session.pop_scope()
        else:
            stranger = Session(Collector(()), block=False)
            token = stranger.enter()
            call()
            stranger.exit(token)

    def close(self, token: Any) -> None:
        if self.kind == "ScopeGate":
            self.session.pop_scope()
        self.session.exit(token)


def run(kind: str, entries: tuple, gate_kind: str, shape: str, selection: frozenset[int] | None, by_listener: bool) -> Any:
    key = entries[0].key
    collector = Collector([key], None if selection is None else {key: selection})
    gate = Gate(gate_kind, collector)
    ((_, listener, _),) = hook_listeners([HookRow(nn.Identity(), ".layers.0", entries)], gate.served)
    assert listener.__name__ == kind.split()[0]

    def call(n: int) -> None:
        args = (x + n,)
        if by_listener:
            listener(None, args, {}, SHAPES[shape](n))
        else:
            collector.record(".layers.0", entries, args, {}, SHAPES[shape](n))

    if by_listener:
        call(0)  # the gate is closed: records nothing
    token = gate.open()
    try:
        if by_listener:
            gate.shadowed(lambda: call(9))
        for n in (1, 2, 3):
            call(n)
            collector.begin_call() if n == 2 else None  # a new call of the scope: positions restart
    except CaptureError as e:
        return str(e)
    finally:
        gate.close(token)
    if by_listener:
        call(4)  # closed again
    return state(collector)


@pytest.mark.parametrize("selection", SELECTIONS.values(), ids=SELECTIONS.keys())
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("gate", ["Sessions", "ScopeGate"])
@pytest.mark.parametrize("kind", KINDS)
def test_every_listener_records_what_record_does(kind, gate, shape, selection) -> None:
    entries = (entry_of(*KINDS[kind]),)
    by_listener = run(kind, entries, gate, shape, selection, by_listener=True)
    assert by_listener == run(kind, entries, gate, shape, selection, by_listener=False)


@pytest.mark.parametrize("kind", KINDS)
def test_the_entry_kind_picks_the_listener(kind) -> None:
    key, recorder = KINDS[kind]
    entry = entry_of(key, recorder)
    plan = [(nn.Identity(), ".layers.0", (entry,))]
    interception = Interception()
    install_hooks(plan, Sessions(forward_context()), interception)  # type: ignore[arg-type]
    try:
        module = plan[0][0]
        (installed,) = _interceptor_of(module).listeners
        assert installed[0].__name__ == kind.split()[0]
    finally:
        interception.remove()
    assert (
        entry.kind
        == {
            "hidden_states": "hidden_states",
            "other": "other",
            "selected": "selected",
            "selected other": "selected",
            "general": "transformed",
            "general other": "transformed",
            "general input": "input",
        }[kind]
    )
