"""The sweep's variant (c) follows the decorators transformers puts around a forward.

transformers 5.24 put `deprecate_kwarg("past_key_values", new_name="cache")` outside `capture_outputs` on
its decoder forwards; the harness rebuilt only the decorators it knew and refused every other one. A
wrapper it does not know is now kept around the re-decorated code (or unwrapped when it cannot be
rebuilt), so the next new decorator does not stop the sweep.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest
import torch
from helpers_transformers import ToyConfig, ToyOutput, make_normed
from oracle.sweep._redecorate import redecorate
from transformers.utils.deprecation import deprecate_kwarg
from transformers.utils.output_capturing import capture_outputs as hf_capture_outputs

pytestmark = pytest.mark.oracle


def _doubling(forward: Callable[..., Any]) -> Callable[..., Any]:
    """A decorator the harness does not know: doubles the input, holding `forward` in its closure."""

    @functools.wraps(forward)
    def wrapper(self: Any, x: torch.Tensor, **kwargs: Any) -> Any:
        return forward(self, 2 * x, **kwargs)

    return wrapper


def _doubling_by_default(forward: Callable[..., Any]) -> Callable[..., Any]:
    """The same, but `forward` held as a default argument: no closure cell to point elsewhere."""

    def wrapper(self: Any, x: torch.Tensor, _inner: Callable[..., Any] = forward, **kwargs: Any) -> Any:
        return _inner(self, 2 * x, **kwargs)

    return functools.update_wrapper(wrapper, forward)


def _model(outer: Callable[[Callable[..., Any]], Callable[..., Any]]) -> torch.nn.Module:
    """The toy normed model (the same weights every time) with `outer` around its capture-decorated forward."""
    torch.manual_seed(0)
    cls = make_normed(hf_capture_outputs, tie_last_hidden_states=True)
    wrapped = type(cls.__name__, (cls,), {"forward": outer(cls.forward), "__module__": cls.__module__})
    return wrapped(ToyConfig()).eval()


def _run(model: torch.nn.Module, **inputs: torch.Tensor) -> ToyOutput:
    with torch.no_grad():
        return model(**inputs, output_hidden_states=True, output_attentions=True)


def _assert_equal(left: ToyOutput, right: ToyOutput) -> None:
    assert left.keys() == right.keys()
    for key in left.keys():
        values = left[key] if isinstance(left[key], tuple) else (left[key],)
        others = right[key] if isinstance(right[key], tuple) else (right[key],)
        assert len(values) == len(others) and all(torch.equal(a, b) for a, b in zip(values, others)), key


X = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(0))


def test_deprecate_kwarg_outermost_is_kept_around_yamltrace_capture() -> None:
    model = _model(deprecate_kwarg("hidden", version="99.0.0", new_name="x"))
    twin, switched = redecorate(model)
    assert switched == 1
    assert type(twin).forward.__module__ == type(model).forward.__module__
    # The deprecated name still reaches the forward: the wrapper was rebuilt, not dropped.
    _assert_equal(_run(twin, hidden=X), _run(model, hidden=X))


def test_an_unknown_closure_wrapper_is_kept() -> None:
    model = _model(_doubling)
    twin, switched = redecorate(model)
    assert switched == 1
    reference = _run(model, x=X)
    _assert_equal(_run(twin, x=X), reference)
    assert not torch.equal(reference.last_hidden_state, _run(_model(lambda f: f), x=X).last_hidden_state)


def test_an_unknown_wrapper_without_a_closure_cell_is_unwrapped() -> None:
    model = _model(_doubling_by_default)
    twin, switched = redecorate(model)
    assert switched == 1
    # Dropped: the twin runs the capture-decorated forward alone, which the comparison then sees differ.
    _assert_equal(_run(twin, x=X), _run(_model(lambda f: f), x=X))
