"""Listeners ask their gate, as `Session.recording` says. A `trace` scope's listeners ask their
`ScopeGate`: each kind of recorder records exactly while the block records in this context and the
scope is the innermost running. Held hooks' listeners record into the innermost decorated forward's
session."""

from __future__ import annotations

import threading

import pytest
import torch
from torch import nn

from yamltrace.engine import OutputRecorder
from yamltrace.engine._collector import Collector, HookRow, Sessions, entry_of, hook_listeners
from yamltrace.engine._session import NO_CAPTURE, Session, forward_context
from yamltrace.examples.tiny import TinyDecoderLayer

x = torch.ones(1, 4, 2)
KINDS = {  # kind of recorder -> (key, recorder)
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
    ((_, listener, _),) = hook_listeners([HookRow(nn.Identity(), ".layers.0", entries)], session.scope_gate(3, collector))

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


@pytest.mark.parametrize("kind", list(KINDS))
def test_held_listeners_record_exactly_when_their_forward_session_records(kind: str) -> None:
    """Hooks held for decorated forwards (`Sessions`) test `Session.recording`'s rule inline: a call
    records into the session that is the innermost decorated forward running in this context."""
    key, recorder = KINDS[kind]
    entries = (entry_of(key, recorder),)
    ours, other = Session(Collector([key]), block=False), Session(Collector([key]), block=False)
    served = Sessions(forward_context(), (other, ours))
    ((_, listener, _),) = hook_listeners([HookRow(nn.Identity(), ".layers.0", entries)], served)
    recorded: list[bool] = []

    def call() -> None:
        before = len(ours.collector.lists[key]) + len(other.collector.lists[key])
        listener(None, (x,), {}, (x, x))
        recorded.append(len(ours.collector.lists[key]) + len(other.collector.lists[key]) > before)
        assert recorded[-1] == (ours.recording() or other.recording())

    call()  # no decorated forward running
    token = ours.enter()
    try:
        call()  # ours is the innermost: records
        shadow = NO_CAPTURE.enter()  # a nested decorated forward capturing nothing shadows it
        call()
        NO_CAPTURE.exit(shadow)
        stranger = Session(Collector([key]), block=False)
        inner = stranger.enter()  # a nested forward whose session these hooks do not serve
        call()
        stranger.exit(inner)
        other_thread = threading.Thread(target=call)
        other_thread.start()  # ours is not running in that thread's context
        other_thread.join()
        call()  # ours again
    finally:
        ours.exit(token)
    call()  # ended
    assert recorded == [False, True, False, False, False, True, False]
    assert len(ours.collector.lists[key]) >= 2 and other.collector.lists[key] == []
