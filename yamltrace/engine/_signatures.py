"""The signature an intercepted module's `forward` shows: the signature of the forward it shadows.

Callers read it. transformers' `generate` passes `attention_mask`, `position_ids` and `logits_to_keep`
only to a forward whose signature names them, so a forward showing `(*args, **kwargs)` would change
what a traced model generates (a left-padded GPT-2 batch gets other position ids). An interceptor's
method is therefore bound from a copy of its function that carries the shadowed forward's signature
(`__signature__`, which `inspect.signature` reads). The copies are kept per class forward, so dynamo,
which guards on the method's function, sees one function per class and block after block.
"""

from __future__ import annotations

import inspect
import threading
import types
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["signed"]

# Per class forward (the function of a bound `module.forward`): the copies made of the interceptor methods.
_copies: weakref.WeakKeyDictionary[Any, tuple[types.FunctionType, ...]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()
_BOUND = inspect.Parameter("_interceptor", inspect.Parameter.POSITIONAL_ONLY)  # dropped when bound


def signed(methods: tuple[types.FunctionType, ...], shadowed: Callable[..., Any]) -> tuple[types.FunctionType, ...]:
    """`methods` (functions of the interceptor class), or copies of them whose signature, once bound,
    is `shadowed`'s; `methods` themselves where `shadowed` has no signature `inspect` can read. One
    lookup serves them all (each new interceptor asks)."""
    source = getattr(shadowed, "__func__", None)
    key = source if isinstance(source, types.FunctionType) else None
    if key is not None:
        found = _copies.get(key)
        if found is not None and len(found) == len(methods):
            return found
    try:
        signature = inspect.signature(shadowed)
        shown = signature.replace(parameters=[_BOUND, *signature.parameters.values()])
    except (TypeError, ValueError):
        return methods
    copies = tuple(_copy(method, shown) for method in methods)
    if key is not None:
        with _lock:
            copies = _copies.setdefault(key, copies)
    return copies


def _copy(method: types.FunctionType, shown: inspect.Signature) -> types.FunctionType:
    copy = types.FunctionType(method.__code__, method.__globals__, method.__name__, method.__defaults__, method.__closure__)
    copy.__kwdefaults__, copy.__qualname__, copy.__doc__ = method.__kwdefaults__, method.__qualname__, method.__doc__
    copy.__signature__ = shown  # type: ignore[attr-defined]
    return copy
