"""Forward interception: call listeners with a module's inputs and output, without forward hooks.

A capture installs its listeners for each capturing forward and removes them after, so both the cost
of installing and the cost per call matter. A module carrying forward hooks takes `nn.Module`'s slow
call path, and registering and removing a hook costs more than setting an attribute; an
interceptor costs less on both counts (figures: docs/performance.md): it is set as the instance's
`forward` (an entry of the module's `__dict__`, which `nn.Module.__call__` reads as `self.forward`),
calls the forward it shadows, then each listener.

Listeners see what forward hooks would see: the arguments after forward pre-hooks ran, the output
before forward hooks ran. A *frame* is a pair of callbacks around the forward and its listeners
(`trace` delimits its steps and scopes with them): `enter()` before, `exit(token, output, finished)`
after, with `enter`'s return value as the token, also when the forward or a listener raised
(`finished` False, output None); frames enter in the order installed and exit in reverse. Concurrent sessions on one module share its interceptor; removing the last
listener restores the module's `__dict__` exactly. A copy of a module made while it is intercepted
(`copy.deepcopy`, pickling) gets a pass-through with no listeners. While intercepted,
`inspect.signature(module.forward)` is `(*args, **kwargs)`. Dynamo guards on the instance `forward`,
so code compiled before an interception is recompiled (once) to include it.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterable
from itertools import repeat
from typing import Any

from torch import nn

__all__ = ["Listener", "Enter", "Exit", "Interception", "intercept"]

# Called after the module's forward returned: (its context, positional args, keyword args, output).
Listener = Callable[[Any, tuple[Any, ...], dict[str, Any], Any], None]
# A frame: called before the forward (returns a token), and after it: (token, output, finished).
Enter = Callable[[], Any]
Exit = Callable[[Any, Any, bool], None]

_FORWARD = "forward"
# Serialises installs and removals (not calls: those read an immutable tuple of listeners).
_lock = threading.Lock()


# Marks a module that had no `forward` of its own in its `__dict__`.
_ABSENT = object()


class _Interceptor:
    """What an intercepted module's `forward` is bound to: the frames' entries, the shadowed forward,
    the listeners, then the frames' exits.

    The module's `forward` is the bound method `interceptor.forward`, not the interceptor itself:
    dynamo then guards on the method's function, which all interceptors share, and does not
    recompile for each new interceptor. `listeners` and `frames` are replaced, never mutated, so a
    running call sees one snapshot.
    """

    __slots__ = ("inner", "shadowed", "listeners", "frames")

    def __init__(self, inner: Callable[..., Any], shadowed: Any = _ABSENT) -> None:
        self.inner = inner  # what `module.forward` was: the bound class forward, or `shadowed`
        self.shadowed = shadowed  # the instance attribute it replaced, or _ABSENT
        self.listeners: tuple[tuple[Listener, Any], ...] = ()
        self.frames: tuple[tuple[Enter, Exit], ...] = ()

    def forward(self, /, *args: Any, **kwargs: Any) -> Any:
        # `self` positional-only: a keyword argument is not compared with it by name on each call.
        if self.frames:
            return self._framed(args, kwargs)
        output = self.inner(*args, **kwargs)
        for listener, context in self.listeners:
            listener(context, args, kwargs, output)
        return output

    def _framed(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        frames = self.frames
        if len(frames) == 1:  # the common case (a `trace` root): no lists of tokens
            ((enter, exit),) = frames
            token = enter()
            try:
                output = self.inner(*args, **kwargs)
                for listener, context in self.listeners:
                    listener(context, args, kwargs, output)
            except BaseException:
                exit(token, None, False)
                raise
            exit(token, output, True)
            return output
        tokens = [enter() for enter, _ in frames]
        try:
            output = self.inner(*args, **kwargs)
            for listener, context in self.listeners:
                listener(context, args, kwargs, output)
        except BaseException:
            for (_, exit), token in zip(frames[::-1], tokens[::-1]):
                exit(token, None, False)
            raise
        for (_, exit), token in zip(frames[::-1], tokens[::-1]):
            exit(token, output, True)
        return output

    def __deepcopy__(self, memo: dict[int, Any]) -> _Interceptor:
        # `inner` is bound to the module being copied; deepcopy rebinds it to the copy.
        return _Interceptor(copy.deepcopy(self.inner, memo))

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Interceptor, (self.inner,))


class Interception:
    """Listeners and frames installed together on several modules; `remove()` takes them all off
    (idempotent)."""

    __slots__ = ("_installed", "_dicts", "_forwards", "_given")

    def __init__(self, installed: list[tuple[nn.Module, _Interceptor, tuple[Any, Any], bool]], given: Any = ((), ())) -> None:
        self._installed = installed  # (module, its interceptor, the listener or frame, is a frame)
        # Each module's `__dict__` and the `forward` it held once installed (for `intact`).
        self._dicts = [module.__dict__ for module, _, _, _ in installed]
        self._forwards = list(map(dict.get, self._dicts, repeat(_FORWARD)))
        self._given = given  # the items and frames `intercept` was given (for `again`)

    def again(self) -> Interception:
        """The same listeners and frames installed anew, as `intercept` installed them (this one is
        removed first): a `trace` run kept for its plan installs the same ones for each block."""
        self.remove()
        return intercept(*self._given)

    def intact(self) -> bool:
        """Whether every intercepted module still calls its interceptor: no `forward` has been set on
        one of the instances since (which would bypass the interceptor and its listeners), unless it
        wraps the interceptor (`functools.wraps`: `__wrapped__`) or was removed again."""
        if list(map(dict.get, self._dicts, repeat(_FORWARD))) == self._forwards:
            return True  # (the common case: one C-level pass, no Python call per module)
        return all(_interceptor_of(module.__dict__.get(_FORWARD)) is interceptor for module, interceptor, _, _ in self._installed)

    def remove(self) -> None:
        installed, self._installed = self._installed, []
        if not installed:
            return
        with _lock:
            for module, interceptor, entry, is_frame in installed:
                if is_frame:
                    interceptor.frames = _without(interceptor.frames, entry)
                else:
                    interceptor.listeners = _without(interceptor.listeners, entry)
                if interceptor.listeners or interceptor.frames:
                    continue
                own = module.__dict__
                if getattr(own.get(_FORWARD), "__self__", None) is interceptor:
                    if interceptor.shadowed is _ABSENT:
                        del own[_FORWARD]
                    else:
                        own[_FORWARD] = interceptor.shadowed
                # If other code set `forward` over ours meanwhile, ours stays underneath as a
                # pass-through (no listeners), so theirs keeps working.


def _without(entries: tuple[Any, ...], entry: Any) -> tuple[Any, ...]:
    if len(entries) == 1 and entries[0] is entry:
        return ()
    return tuple(x for x in entries if x is not entry)


def _interceptor_of(forward: Any) -> _Interceptor | None:
    """The interceptor behind an instance `forward`, even under a wrapper set over it later."""
    while forward is not None:
        owner = getattr(forward, "__self__", None)
        if isinstance(owner, _Interceptor):
            return owner
        forward = getattr(forward, "__wrapped__", None)
    return None


def intercept(
    items: Iterable[tuple[nn.Module, Listener, Any]], frames: Iterable[tuple[nn.Module, Enter, Exit]] = ()
) -> Interception:
    """For each `(module, listener, context)`, call `listener(context, args, kwargs, output)` after each
    call of the module's forward, and around it each frame `(module, enter, exit)` (module docstring),
    until the returned `Interception` is removed. One lock for all."""
    items, frames = tuple(items), tuple(frames)
    installed: list[tuple[nn.Module, _Interceptor, tuple[Any, Any], bool]] = []
    with _lock:
        for module, listener, context in items:
            interceptor = _interceptor_on(module)
            entry: tuple[Any, Any] = (listener, context)
            interceptor.listeners = interceptor.listeners + (entry,)
            installed.append((module, interceptor, entry, False))
        for module, enter, exit in frames:
            interceptor = _interceptor_on(module)
            entry = (enter, exit)
            interceptor.frames = interceptor.frames + (entry,)
            installed.append((module, interceptor, entry, True))
    return Interception(installed, (items, frames))


def _interceptor_on(module: nn.Module) -> _Interceptor:
    """The module's interceptor, set as its `forward` if it has none yet (called holding `_lock`)."""
    own = module.__dict__
    shadowed = own.get(_FORWARD, _ABSENT)
    interceptor = None if shadowed is _ABSENT else _interceptor_of(shadowed)
    if interceptor is None:
        interceptor = _Interceptor(module.forward, shadowed)
        own[_FORWARD] = interceptor.forward
    return interceptor
