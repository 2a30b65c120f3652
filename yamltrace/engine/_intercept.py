"""Forward interception: call listeners with a module's inputs and output, without forward hooks.

A capture installs its listeners for each capturing forward and removes them after, so both the cost
of installing and the cost per call matter. A module carrying forward hooks takes `nn.Module`'s slow
call path (about 1.3 µs more per call, see docs/performance.md) and registering plus removing one
hook costs about 2 µs. An interceptor costs about 0.2 µs per call and well under 1 µs to install and
remove: it is set as the instance's `forward` (an entry of the module's `__dict__`, which
`nn.Module.__call__` reads as `self.forward`), calls the forward it shadows, then each listener.

Listeners see what forward hooks would see: the arguments after forward pre-hooks ran, the output
before forward hooks ran. Concurrent sessions on one module share its interceptor; removing the last
listener restores the module's `__dict__` exactly. A copy of a module made while it is intercepted
(`copy.deepcopy`, pickling) gets a pass-through with no listeners. While intercepted,
`inspect.signature(module.forward)` is `(*args, **kwargs)`. Dynamo guards on the instance `forward`,
so code compiled before an interception is recompiled (once) to include it.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterable
from typing import Any

from torch import nn

__all__ = ["Listener", "Interception", "intercept"]

# Called after the module's forward returned: (its context, positional args, keyword args, output).
Listener = Callable[[Any, tuple[Any, ...], dict[str, Any], Any], None]

_FORWARD = "forward"
# Serialises installs and removals (not calls: those read an immutable tuple of listeners).
_lock = threading.Lock()


# Marks a module that had no `forward` of its own in its `__dict__`.
_ABSENT = object()


class _Interceptor:
    """What an intercepted module's `forward` is bound to: the shadowed forward, then the listeners.

    The module's `forward` is the bound method `interceptor.forward`, not the interceptor itself:
    dynamo then guards on the method's function, which all interceptors share, and does not
    recompile for each new interceptor. `listeners` is replaced, never mutated, so a running call
    sees one snapshot.
    """

    __slots__ = ("inner", "shadowed", "listeners")

    def __init__(self, inner: Callable[..., Any], shadowed: Any = _ABSENT) -> None:
        self.inner = inner  # what `module.forward` was: the bound class forward, or `shadowed`
        self.shadowed = shadowed  # the instance attribute it replaced, or _ABSENT
        self.listeners: tuple[tuple[Listener, Any], ...] = ()

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        output = self.inner(*args, **kwargs)
        for listener, context in self.listeners:
            listener(context, args, kwargs, output)
        return output

    def __deepcopy__(self, memo: dict[int, Any]) -> _Interceptor:
        # `inner` is bound to the module being copied; deepcopy rebinds it to the copy.
        return _Interceptor(copy.deepcopy(self.inner, memo))

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Interceptor, (self.inner,))


class Interception:
    """Listeners installed together on several modules; `remove()` takes them all off (idempotent)."""

    __slots__ = ("_installed",)

    def __init__(self, installed: list[tuple[nn.Module, _Interceptor, tuple[Listener, Any]]]) -> None:
        self._installed = installed

    def remove(self) -> None:
        installed, self._installed = self._installed, []
        if not installed:
            return
        with _lock:
            for module, interceptor, entry in installed:
                listeners = interceptor.listeners
                if len(listeners) == 1 and listeners[0] is entry:
                    listeners = ()
                else:
                    listeners = tuple(x for x in listeners if x is not entry)
                interceptor.listeners = listeners
                if listeners:
                    continue
                own = module.__dict__
                if getattr(own.get(_FORWARD), "__self__", None) is interceptor:
                    if interceptor.shadowed is _ABSENT:
                        del own[_FORWARD]
                    else:
                        own[_FORWARD] = interceptor.shadowed
                # If other code set `forward` over ours meanwhile, ours stays underneath as a
                # pass-through (no listeners), so theirs keeps working.


def _interceptor_of(forward: Any) -> _Interceptor | None:
    """The interceptor behind an instance `forward`, even under a wrapper set over it later."""
    while forward is not None:
        owner = getattr(forward, "__self__", None)
        if isinstance(owner, _Interceptor):
            return owner
        forward = getattr(forward, "__wrapped__", None)
    return None


def intercept(items: Iterable[tuple[nn.Module, Listener, Any]]) -> Interception:
    """For each `(module, listener, context)`, call `listener(context, args, kwargs, output)` after each
    call of the module's forward, until the returned `Interception` is removed. One lock for all."""
    installed = []
    with _lock:
        for module, listener, context in items:
            entry = (listener, context)
            own = module.__dict__
            shadowed = own.get(_FORWARD, _ABSENT)
            interceptor = None if shadowed is _ABSENT else _interceptor_of(shadowed)
            if interceptor is None:
                interceptor = _Interceptor(module.forward, shadowed)
                own[_FORWARD] = interceptor.forward
            interceptor.listeners = interceptor.listeners + (entry,)
            installed.append((module, interceptor, entry))
    return Interception(installed)
