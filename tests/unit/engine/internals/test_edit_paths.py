"""The copies of an output edit's rules: the gate written out in each of `_gated`'s closures follows
`session_records`, and the direct path (add or scale by a number or a vector, straight to the torch
op) gives exactly what the general path (`Edit.tensor`, `Edit.output`) gives, errors included, for
every kind of value and tensor."""

from __future__ import annotations

import contextvars

import pytest
import torch
from torch import nn

from yamltrace import OutputRecorder, SpecError
from yamltrace.engine import Collector, Intervention, Session
from yamltrace.engine._collector import session_records
from yamltrace.engine._editing import _gated
from yamltrace.engine._editing import Edit

H = 4
VALUES = {  # name -> (operation, value): each closure of `_gated` (general, number, vector)
    "add a vector": ("add", lambda: torch.linspace(-1, 1, H)),
    "scale by a vector": ("scale", lambda: torch.linspace(0.5, 2, H)),
    "add a float64 vector": ("add", lambda: torch.linspace(-1, 1, H, dtype=torch.float64)),
    "add a vector of one": ("add", lambda: torch.tensor([2.0])),
    "add a number": ("add", lambda: 0.5),
    "scale by an int": ("scale", lambda: 3),
    "add a 0-dim tensor": ("add", lambda: torch.tensor(1.5)),
    "add a [seq, hidden] tensor": ("add", lambda: torch.ones(3, H)),
    "clamp": ("clamp", lambda: (-0.5, 0.5)),
    "set a vector": ("set", lambda: torch.arange(H, dtype=torch.float32)),
}
TENSORS = {  # what a module returns
    "[2, 3, H]": lambda: torch.randn(2, 3, H, generator=torch.Generator().manual_seed(0)),
    "[2, 3, H] float64": lambda: torch.randn(2, 3, H, dtype=torch.float64),
    "[2, 3, H] bfloat16": lambda: torch.randn(2, 3, H).bfloat16(),
    "[H] int64": lambda: torch.arange(H),
    "[2, 3, 1]: a vector would grow it": lambda: torch.randn(2, 3, 1),
    "[2, 3, 5]: no fit": lambda: torch.randn(2, 3, 5),
    "0-dim": lambda: torch.tensor(0.25),
    "(tensor, tensor) tuple": lambda: (torch.randn(2, 3, H), torch.randn(2)),
}


def edit_of(operation: str, value) -> Edit:
    return Edit(Intervention("x", OutputRecorder(nn.Linear), operation, value), ".x", value, None)


def outcome(call, output):
    """What a call gives: the edited value(s) with their dtype and shape, or the error's type and message."""
    try:
        got = call(output)
    except (SpecError, RuntimeError) as e:
        return type(e), str(e)
    return got


def same(a, b) -> bool:
    if isinstance(a, tuple) and not isinstance(a[0], type):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    return a == b


@pytest.mark.parametrize("value_name", VALUES)
@pytest.mark.parametrize("tensor_name", TENSORS)
@pytest.mark.parametrize("session", [None, "open block"])
def test_the_direct_path_gives_what_the_general_path_gives(value_name, tensor_name, session) -> None:
    operation, make = VALUES[value_name]
    general, direct = edit_of(operation, make()), edit_of(operation, make())
    gate = None
    if session is not None:
        gate = Session(Collector(()), block=True)
        token = gate.enter()
    gated = _gated(direct, gate, [False], 0)
    for _ in range(2):  # the second call: after the general path kept a value converted
        output = TENSORS[tensor_name]()
        expected = outcome(general.output, output)
        assert same(outcome(gated, output), expected)
    if isinstance(general.value, torch.Tensor):  # the same value kept for the next calls
        assert same(direct.value, general.value)
    if session is not None:
        gate.exit(token)


def test_a_vector_that_would_grow_the_tensor_is_a_located_error_on_the_direct_path() -> None:
    gated = _gated(edit_of("add", torch.ones(H)), None, [False], 0)
    with pytest.raises(SpecError, match=r"shape \(4,\) does not broadcast to the values of shape \(2, 3, 1\)"):
        gated(torch.zeros(2, 3, 1))


@pytest.mark.parametrize("operation", ["add", "scale"])
def test_a_vector_that_requires_grad_gets_gradients_on_the_direct_path(operation) -> None:
    vector = torch.linspace(-1, 1, H, requires_grad=True)
    gated = _gated(edit_of(operation, vector), None, [False], 0)
    x = torch.ones(2, 3, H)
    gated(x).sum().backward()
    expected = torch.full((H,), 6.0) if operation == "add" else x.sum((0, 1))
    assert torch.equal(vector.grad, expected)


def test_a_value_that_requires_grad_is_converted_per_call_not_kept() -> None:
    vector = torch.linspace(-1, 1, H, dtype=torch.float64, requires_grad=True)
    edit = edit_of("add", vector)
    gated = _gated(edit, None, [False], 0)
    for _ in range(2):
        gated(torch.ones(2, H)).sum().backward()
    assert edit.value is vector and torch.equal(vector.grad, torch.full((H,), 4.0, dtype=torch.float64))


def test_outputs_are_new_tensors_on_the_direct_path() -> None:
    x = torch.zeros(2, H)
    before = x.clone()
    edited = _gated(edit_of("add", torch.ones(H)), None, [False], 0)(x)
    assert edited is not x and torch.equal(x, before) and torch.equal(edited, torch.ones(2, H))


@pytest.mark.parametrize("value_name", ["add a vector", "add a number", "clamp"])
def test_each_output_closures_inline_gate_follows_session_records(value_name) -> None:
    # Each of `_gated`'s output closures writes `session_records`' rule out: it edits exactly when the rule records.
    operation, make = VALUES[value_name]
    session = Session(Collector(()), block=True)
    gated = _gated(edit_of(operation, make()), session, [False], 0)
    x = torch.full((2, H), 3.0)

    def agrees() -> bool:
        edited = not torch.equal(gated(x), x) and not torch.equal(gated((x, x))[0], x)
        return edited == session_records(session)

    assert agrees() and not session_records(session)  # not entered
    token = session.enter()
    assert agrees() and session_records(session)  # entered in this context
    assert contextvars.Context().run(agrees)  # another context: closed there
    session.exit(token)
    assert agrees() and not session_records(session)  # closed


@pytest.mark.parametrize(
    "value, output",
    [(torch.ones(H), torch.tensor(0.25)), (torch.ones(1), torch.tensor(0.25)), (torch.ones(1, 1, 1), torch.zeros(2, H))],
    ids=["a vector on a 0-dim tensor", "one element on a 0-dim tensor", "one element of more dimensions"],
)
def test_a_value_that_would_add_dimensions_is_a_located_error(value, output) -> None:
    with pytest.raises(SpecError, match=r"\$\.interventions\.x: .*does not broadcast to the values of shape"):
        edit_of("add", value).output(output)
