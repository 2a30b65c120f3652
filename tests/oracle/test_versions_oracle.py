"""The rules that changed between supported transformers releases, compared with the installed one.

Whatever release the CI matrix installs, yamltrace's own outputs answer every cache-field operation
as transformers' outputs do (the same value, or an error of the same kind), and
`merge_with_config_defaults` leaves `use_cache` as transformers' does in every combination of
training, gradient checkpointing and `torch.is_grad_enabled()`. The warnings differ in kind on
purpose (transformers logs once through its logger, yamltrace warns), so they are not compared.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from torch import nn

from yamltrace import modeling as yamltrace_modeling
from yamltrace.modeling import Config, merge_with_config_defaults

pytestmark = pytest.mark.oracle

NAMES = ("cache", "past_key_values", "cache_params")
ERRORS = (KeyError, AttributeError, TypeError, ValueError)


class Cache:
    """A stand-in for a `DynamicCache`."""


CACHE = Cache()


def _with_cache(library: Any) -> Any:
    """A `BaseModelOutputWithPast` of `library` holding `CACHE` under the field name the library uses."""
    cls = library.BaseModelOutputWithPast
    field = "cache" if "cache" in cls.__dataclass_fields__ else "past_key_values"
    return cls(last_hidden_state=1, **{field: CACHE})


def _set_item(name: str) -> Callable[[Any], Any]:
    def run(library: Any) -> Any:
        out = library.BaseModelOutputWithPast(last_hidden_state=1)
        out[name] = CACHE
        return out.to_tuple()

    return run


def _set_attribute(name: str) -> Callable[[Any], Any]:
    def run(library: Any) -> Any:
        out = library.BaseModelOutputWithPast(last_hidden_state=1)
        setattr(out, name, CACHE)
        return out.to_tuple()

    return run


@functools.cache
def _declaring(library: Any) -> type:
    """An output class of `library` that still declares `past_key_values` as a field, as remote code does."""

    @dataclass
    class DeclaresPastKeyValues(library.ModelOutput):
        last_hidden_state: Any = None
        past_key_values: Any = None
        hidden_states: Any = None

    return DeclaresPastKeyValues


def _declaring_set(name: str, how: str) -> Callable[[Any], Any]:
    def run(library: Any) -> Any:
        out = _declaring(library)(last_hidden_state=1)
        if how == "item":
            out[name] = CACHE
        else:
            setattr(out, name, CACHE)
        return list(out.keys()), out.to_tuple()

    return run


def _declaring_operations() -> dict[str, Callable[[Any], Any]]:
    """The operations on a class that declares `past_key_values` (5.25.0 keeps its names, 5.24.0 renames them)."""
    ops: dict[str, Callable[[Any], Any]] = {}
    for name in NAMES:
        ops[f"declares past_key_values: {name}="] = lambda lib, name=name: list(
            _declaring(lib)(last_hidden_state=1, **{name: CACHE}).keys()
        )
        ops[f"declares past_key_values: out[{name!r}]"] = lambda lib, name=name: _declaring(lib)(1, CACHE)[name]
        ops[f"declares past_key_values: out.{name}"] = lambda lib, name=name: getattr(_declaring(lib)(1, CACHE), name)
        ops[f"declares past_key_values: {name!r} in out"] = lambda lib, name=name: name in _declaring(lib)(1, CACHE)
        ops[f"declares past_key_values: out.get({name!r})"] = lambda lib, name=name: _declaring(lib)(1, CACHE).get(name, "-")
        ops[f"declares past_key_values: out[{name!r}] = cache"] = _declaring_set(name, "item")
        ops[f"declares past_key_values: out.{name} = cache"] = _declaring_set(name, "attribute")
    ops["declares past_key_values: keys"] = lambda lib: list(_declaring(lib)(1, CACHE).keys())
    ops["declares past_key_values: to_tuple"] = lambda lib: _declaring(lib)(1, CACHE).to_tuple()
    return ops


def _operations() -> dict[str, Callable[[Any], Any]]:
    ops: dict[str, Callable[[Any], Any]] = {
        "keys": lambda lib: list(_with_cache(lib).keys()),
        "to_tuple": lambda lib: _with_cache(lib).to_tuple(),
        "both names": lambda lib: lib.BaseModelOutputWithPast(cache=CACHE, past_key_values=CACHE),
        "two aliases": lambda lib: lib.BaseModelOutputWithPast(past_key_values=CACHE, cache_params=CACHE),
    }
    for name in NAMES:
        ops[f"{name}="] = lambda lib, name=name: lib.BaseModelOutputWithPast(last_hidden_state=1, **{name: CACHE}).to_tuple()
        ops[f"out[{name!r}]"] = lambda lib, name=name: _with_cache(lib)[name]
        ops[f"out.{name}"] = lambda lib, name=name: getattr(_with_cache(lib), name)
        ops[f"{name!r} in out"] = lambda lib, name=name: name in _with_cache(lib)
        ops[f"out.get({name!r})"] = lambda lib, name=name: _with_cache(lib).get(name, "default")
        ops[f"out[{name!r}] = cache"] = _set_item(name)
        ops[f"out.{name} = cache"] = _set_attribute(name)
        ops[f"no cache field: out.{name}"] = lambda lib, name=name: getattr(lib.BaseModelOutput(last_hidden_state=1), name)
        ops[f"no cache field: {name!r} in out"] = lambda lib, name=name: name in lib.BaseModelOutput(last_hidden_state=1)
    return ops | _declaring_operations()


OPERATIONS = _operations()


def outcome(operation: Callable[[Any], Any], library: Any) -> tuple[str, Any]:
    """("value", what it returned) or ("error", the builtin kind of what it raised)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return "value", operation(library)
        except ERRORS as error:
            return "error", next(kind for kind in ERRORS if isinstance(error, kind))


@pytest.mark.parametrize("name", list(OPERATIONS))
def test_an_output_operation_on_the_cache_field_has_the_installed_release_result(name):
    import transformers.modeling_outputs as transformers_outputs

    operation = OPERATIONS[name]
    assert outcome(operation, yamltrace_modeling) == outcome(operation, transformers_outputs)


def _use_cache_seen(decorator: Callable[..., Any], training: bool, checkpointing: bool, grad: bool, **call: Any) -> Any:
    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.config = Config(use_cache=True)
            self.gradient_checkpointing = checkpointing

        @decorator
        def forward(self, x: Any = None, use_cache: bool | None = None, **kwargs: Any) -> Any:
            return use_cache

    with torch.set_grad_enabled(grad), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Model().train(training)(0, **call)


@pytest.mark.parametrize("call", [{}, {"use_cache": True}, {"use_cache": False}], ids=["config", "kwarg", "off"])
@pytest.mark.parametrize("grad", [True, False], ids=["grad", "no_grad"])
@pytest.mark.parametrize("checkpointing", [True, False], ids=["checkpointing", "plain"])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_merge_with_config_defaults_sets_use_cache_as_the_installed_release(training, checkpointing, grad, call):
    from transformers.utils.generic import merge_with_config_defaults as transformers_merge

    expected = _use_cache_seen(transformers_merge, training, checkpointing, grad, **call)
    assert _use_cache_seen(merge_with_config_defaults, training, checkpointing, grad, **call) is expected
