"""A `trace` scope's listeners test their `ScopeGate` inline: each kind records exactly while the block
records in this context and the scope is the innermost running, as `Session.recording` and the scope
stack say."""

from __future__ import annotations

import threading

import pytest
import torch
from torch import nn

from yamltrace.engine import OutputRecorder
from yamltrace.engine._collector import Collector, _listener, entry_of
from yamltrace.engine._session import Session
from yamltrace.examples.tiny import TinyDecoderLayer

x = torch.ones(1, 4, 2)
KINDS = {  # listener name -> (key, recorder)
    "hidden_states": ("hidden_states", OutputRecorder(TinyDecoderLayer, index=0)),
    "other": ("attentions", OutputRecorder(TinyDecoderLayer, index=1)),
    "selected": ("hidden_states", OutputRecorder(TinyDecoderLayer, index=0, positions=[-1])),
    "general": ("hidden_states", OutputRecorder(TinyDecoderLayer, index=0, detach=True)),
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_records_only_while_open_and_innermost(kind: str) -> None:
    key, recorder = KINDS[kind]
    entries = (entry_of(key, recorder),)
    session = Session(Collector(()), block=True)
    collector = Collector([key])
    listener = _listener((nn.Identity(), ".layers.0", entries), session.scope_gate(3, collector),
                         {key} if kind == "general" else set())
    assert listener.__name__ == kind

    def call() -> None:
        listener(None, (x,), {}, (x, x))

    call()  # block not entered, no scope running
    session.scopes.append(3)
    call()  # scope running, block not entered in this context
    token = session.enter()
    try:
        session.scopes.append(5)
        call()  # another scope is the innermost
        session.scopes.pop()
        call()  # records
        other_thread = threading.Thread(target=call)
        other_thread.start()  # the block is not open in that thread's context
        other_thread.join()
        session.scopes.pop()
        call()  # no scope running
    finally:
        session.exit(token)
    session.scopes.append(3)
    call()  # block exited
    expected = Collector([key])  # what one recording call keeps
    expected.record(".layers.0", entries, (x,), {}, (x, x))
    assert len(expected.lists[key]) >= 1
    assert [v.tolist() for v in collector.lists[key]] == [v.tolist() for v in expected.lists[key]]
    assert collector.paths[key] == expected.paths[key]
