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

# Per class forward (the function of a bound `module.forward`): the copies made of each interceptor method.
_copies: weakref.WeakKeyDictionary[Any, dict[str, types.FunctionType]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()
_BOUND = inspect.Parameter("_interceptor", inspect.Parameter.POSITIONAL_ONLY)  # dropped when bound


def signed(method: types.FunctionType, shadowed: Callable[..., Any]) -> types.FunctionType:
    """`method` (a function of the interceptor class), or a copy of it whose signature, once bound,
    is `shadowed`'s; `method` itself where `shadowed` has no signature `inspect` can read."""
    source = getattr(shadowed, "__func__", None)
    key = source if isinstance(source, types.FunctionType) else None
    if key is not None:
        found = _copies.get(key)
        if found is not None and method.__name__ in found:
            return found[method.__name__]
    try:
        signature = inspect.signature(shadowed)
        shown = signature.replace(parameters=[_BOUND, *signature.parameters.values()])
    except (TypeError, ValueError):
        return method
    copy = types.FunctionType(method.__code__, method.__globals__, method.__name__, method.__defaults__, method.__closure__)
    copy.__kwdefaults__, copy.__qualname__, copy.__doc__ = method.__kwdefaults__, method.__qualname__, method.__doc__
    copy.__signature__ = shown  # type: ignore[attr-defined]
    if key is not None:
        with _lock:
            copy = _copies.setdefault(key, {}).setdefault(method.__name__, copy)
    return copy
