"""Forward interception: call listeners with a module's inputs and output, without forward hooks.

A capture installs its listeners for each capturing forward and removes them after, so both the cost
of installing and the cost per call matter. A module carrying forward hooks takes `nn.Module`'s slow
call path, and registering and removing a hook costs more than setting an attribute; an
interceptor costs less on both counts (figures: docs/performance.md): it is set as the instance's
`forward` (an entry of the module's `__dict__`, which `nn.Module.__call__` reads as `self.forward`),
calls the forward it shadows, then each listener.

Listeners see what the caller of the module receives: the arguments after forward pre-hooks ran, the
output after forward hooks ran. *Edits* change what the module receives (`inputs`: `(args, kwargs)
-> (args, kwargs)`, before the forward) and what it returns (`outputs`: `output -> output`, before
the listeners), in the order installed. A *frame* is a pair of callbacks around the forward and its
listeners (`trace` delimits its steps and scopes with them): `enter(args, kwargs)` before,
`exit(token, output, finished)` after, with `enter`'s return value as the token, also when the
forward or a listener raised (`finished` False, output None); frames enter in the order installed
and exit in reverse. On a module without forward hooks the interceptor does all this itself; on one
that carries forward hooks of others when something is installed (the slower path), its own hooks,
registered after those, do it: a forward pre-hook (for input edits and frames' entries), a forward
hook that edits, calls the listeners and exits the frames, so they see what the others' hooks
returned and those hooks see the edited arguments, and a last one, which torch calls also when the
forward or a hook raised an `Exception` (`always_call`), that exits the frames still entered.
Concurrent sessions on one module share its interceptor; removing the last listener restores the
module's `__dict__` exactly. A copy of a module made while it is intercepted
(`copy.deepcopy`, pickling) gets a pass-through with no listeners. While intercepted,
`inspect.signature(module.forward)` is the signature of the forward it shadows (`_signatures`), which
callers such as `generate` read. Dynamo guards on the instance `forward`,
so code compiled before an interception is recompiled (once) to include it.
"""

from __future__ import annotations

import copy
import threading
from types import MethodType
from collections.abc import Callable, Iterable
from itertools import repeat
from typing import Any

from torch import nn
from torch.nn.modules.module import _global_forward_hooks

from ._signatures import signed

__all__ = ["Listener", "Enter", "Exit", "InputEdit", "OutputEdit", "INPUTS", "OUTPUTS", "Interception", "intercept", "observing"]

# Called after the module's forward returned: (its context, positional args, keyword args, output).
Listener = Callable[[Any, tuple[Any, ...], dict[str, Any], Any], None]
# Edits: of what the module receives (before its forward), of what it returns (before the listeners).
InputEdit = Callable[[tuple[Any, ...], dict[str, Any]], tuple[tuple[Any, ...], dict[str, Any]]]
OutputEdit = Callable[[Any], Any]
INPUTS, OUTPUTS = "inputs", "outputs"
# A frame: called before the forward with its (args, kwargs) (returns a token), and after it: (token, output, finished).
Enter = Callable[[tuple[Any, ...], dict[str, Any]], Any]
Exit = Callable[[Any, Any, bool], None]

_FORWARD = "forward"
# Serialises installs and removals (not calls: those read immutable tuples).
_lock = threading.Lock()
# How many times interceptors' entries changed (`intercept`, `Interception.remove`; counted holding
# `_lock`): a `Prepared` that reads the same count at its removal as at its installation knows that no
# entry joined or left any interceptor meanwhile.
entry_changes = [0]


# Marks a module that had no `forward` of its own in its `__dict__`.
_ABSENT = object()
# What an `Interception` installs on an interceptor: the name of the tuple it joins.
_LISTENERS, _FRAMES = "listeners", "frames"


class _Interceptor:
    """What an intercepted module's `forward` is bound to: the input edits, the frames' entries, the
    shadowed forward, the output edits and the listeners, then the frames' exits.

    The module's `forward` is a bound method of the interceptor (`bound`), not the interceptor itself:
    dynamo then guards on the method's function, which all interceptors of one class forward share
    (`_signatures`: it shows that forward's signature), and does not recompile for each new interceptor. `forward` serves a module with listeners and frames only; `edited` one with
    edits or on the slower path, whose hooks (`late`: `before_hooks`, `after_hooks`, `unwound`) run
    the edits, listeners and frames (`_bind` picks).
    The tuples are replaced, never mutated, so a running call sees one snapshot.
    """

    __slots__ = ("inner", "shadowed", "listeners", "frames", "inputs", "outputs", "late", "slow", "editing", "pending", "methods")

    def __init__(self, inner: Callable[..., Any], shadowed: Any = _ABSENT) -> None:
        self.inner = inner  # what `module.forward` was: the bound class forward, or `shadowed`
        self.shadowed = shadowed  # the instance attribute it replaced, or _ABSENT
        self.listeners: tuple[tuple[Listener, Any], ...] = ()
        self.frames: tuple[tuple[Enter, Exit], ...] = ()
        self.inputs: tuple[InputEdit, ...] = ()
        self.outputs: tuple[OutputEdit, ...] = ()
        self.late: tuple[Any, ...] = ()  # on the slower path: the handles of its own hooks
        # Whether `late` holds any: what a call reads, since compiled code cannot represent a handle.
        self.slow = False
        self.editing = False  # whether the module's `forward` is `edited`
        # On the slower path: the frames entered by calls running now, by `id` of each call's kwargs.
        self.pending: dict[int, tuple[tuple[tuple[Enter, Exit], ...], list[Any], dict[str, Any]]] = {}
        # `forward` and `edited`, showing the signature of the forward they shadow (`_signatures`).
        self.methods = signed(_METHODS, inner)

    def bound(self, editing: bool = False) -> Callable[..., Any]:
        """What the module's `forward` is set to: `edited` when `editing`, else `forward`, bound."""
        return MethodType(self.methods[editing], self)

    def forward(self, /, *args: Any, **kwargs: Any) -> Any:
        # `self` positional-only: a keyword argument is not compared with it by name on each call.
        if self.frames:
            return self._framed(args, kwargs)
        output = self.inner(*args, **kwargs)
        for listener, context in self.listeners:
            listener(context, args, kwargs, output)
        return output

    def edited(self, /, *args: Any, **kwargs: Any) -> Any:
        if self.slow or self.inputs or self.frames:
            return self._edited(args, kwargs)
        output = self.inner(*args, **kwargs)  # (output edits alone, the common case: `_run` inline)
        for edit in self.outputs:
            output = edit(output)
        for listener, context in self.listeners:
            listener(context, args, kwargs, output)
        return output

    def _edited(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self.slow:  # (edits, listeners and frames run from the hooks: `before_hooks`, `after_hooks`)
            return self.inner(*args, **kwargs)
        for edit in self.inputs:
            args, kwargs = edit(args, kwargs)
        if self.frames:
            return self._framed(args, kwargs)
        return self._run(args, kwargs)

    def _run(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        output = self.inner(*args, **kwargs)
        for edit in self.outputs:
            output = edit(output)
        for listener, context in self.listeners:
            listener(context, args, kwargs, output)
        return output

    def before_hooks(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        """The slower path's forward pre-hook, after the module's other pre-hooks: input edits (so the
        forward and every forward hook get the edited arguments), then the frames' entries, kept in
        `pending` under the call's own kwargs (`after_hooks` or `unwound` exits them)."""
        for edit in self.inputs:
            args, kwargs = edit(args, kwargs)
        frames = self.frames
        if frames:
            kwargs = dict(kwargs)  # this call's own: the hooks after the forward get this very dict
            self.pending[id(kwargs)] = (frames, [enter(args, kwargs) for enter, _ in frames], kwargs)
        return args, kwargs

    def after_hooks(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> Any:
        """The slower path's forward hook, after the module's other forward hooks: edits, listeners,
        then the frames' exits with what the caller receives."""
        try:
            for edit in self.outputs:
                output = edit(output)
            for listener, context in self.listeners:
                listener(context, args, kwargs, output)
        except BaseException:
            self.unwound(module, args, kwargs, None)
            raise
        entered = self.pending.pop(id(kwargs), None) if self.pending else None
        if entered is not None:
            _exit_frames(entered[0], entered[1], output, True)
        return output

    def unwound(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        """The slower path's last forward hook, which torch also calls when the forward or a forward
        hook raised (`always_call`): the exits, unfinished, of the call's frames not exited yet."""
        entered = self.pending.pop(id(kwargs), None)
        if entered is not None:
            _exit_frames(entered[0], entered[1], None, False)

    def _framed(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        frames = self.frames
        if len(frames) == 1:  # the common case (a `trace` root): no lists of tokens
            ((enter, exit),) = frames
            token = enter(args, kwargs)
            try:
                output = self._run(args, kwargs)
            except BaseException:
                exit(token, None, False)
                raise
            exit(token, output, True)
            return output
        tokens = [enter(args, kwargs) for enter, _ in frames]
        try:
            output = self._run(args, kwargs)
        except BaseException:
            _exit_frames(frames, tokens, None, False)
            raise
        _exit_frames(frames, tokens, output, True)
        return output

    def __deepcopy__(self, memo: dict[int, Any]) -> _Interceptor:
        # `inner` is bound to the module being copied; deepcopy rebinds it to the copy.
        return _Interceptor(copy.deepcopy(self.inner, memo))

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Interceptor, (self.inner,))


# The methods a module's `forward` is bound to (`_Interceptor.bound`): `forward`, then `edited`.
_METHODS: tuple[Any, ...] = (_Interceptor.forward, _Interceptor.edited)


def _exit_frames(frames: tuple[tuple[Enter, Exit], ...], tokens: list[Any], output: Any, finished: bool) -> None:
    """Each frame's exit with its entry's token, in reverse order."""
    for (_, exit), token in zip(frames[::-1], tokens[::-1]):
        exit(token, output, finished)


# The ids of yamltrace's own forward hooks that only observe (return None; `_padding`'s root-call
# hooks): they change nothing a caller receives, so they send no module to the slower path.
_observers: set[int] = set()


def observing(*handles: Any) -> Callable[[], None]:
    """Mark forward hooks (their handles) as observers that change no output; returns their remover."""
    _observers.update(handle.id for handle in handles)

    def remove() -> None:
        for handle in handles:
            handle.remove()
            _observers.discard(handle.id)

    return remove


def _foreign_forward_hooks(module: nn.Module, interceptor: _Interceptor) -> bool:
    """Whether forward hooks other than the interceptor's own and the observers run after the module's forward."""
    own = [handle.id for handle in interceptor.late]
    return bool(_global_forward_hooks) or any(key not in own and key not in _observers for key in module._forward_hooks)


def _bind(module: nn.Module, interceptor: _Interceptor) -> None:
    """Set the module's `forward` to the interceptor method its contents need, and its own forward hook
    on or off (called holding `_lock`, with something installed on the interceptor). Nothing to do, at
    the cost of a few attribute reads, for listeners and frames alone on a module without hooks."""
    if not (
        interceptor.inputs
        or interceptor.outputs
        or interceptor.editing
        or interceptor.late
        or module._forward_hooks
        or _global_forward_hooks
    ):
        return
    framed, before = bool(interceptor.frames), bool(interceptor.inputs or interceptor.frames)
    late = bool(interceptor.listeners or interceptor.outputs or before) and _foreign_forward_hooks(module, interceptor)
    if late != bool(interceptor.late) or late and len(interceptor.late) != 1 + before + framed:
        _unhook(interceptor)
        if late:
            after = module.register_forward_hook(interceptor.after_hooks, with_kwargs=True)
            pre = [module.register_forward_pre_hook(interceptor.before_hooks, with_kwargs=True)] if before else []
            unwound = interceptor.unwound
            last = [module.register_forward_hook(unwound, with_kwargs=True, always_call=True)] if framed else []
            interceptor.late = (after, *pre, *last)
            interceptor.slow = True
    interceptor.editing = late or bool(interceptor.inputs or interceptor.outputs)
    method = interceptor.bound(interceptor.editing)
    own = module.__dict__
    current = own.get(_FORWARD)
    if getattr(current, "__self__", None) is interceptor and current != method:
        own[_FORWARD] = method


def _unhook(interceptor: _Interceptor) -> None:
    """Remove the interceptor's own hooks (the slower path's), if any."""
    for handle in interceptor.late:
        handle.remove()
    interceptor.late = ()
    interceptor.slow = False


class Interception:
    """Listeners, frames and edits installed together on several modules; `remove()` takes them all
    off (idempotent)."""

    __slots__ = ("_installed", "_dicts", "_forwards", "_hooks", "_hook_counts")

    def __init__(self, installed: list[tuple[nn.Module, _Interceptor, Any, str]]) -> None:
        self._installed = installed  # (module, its interceptor, what was installed, the tuple it joined)
        # Each module's `__dict__` and the `forward` it held once installed (for `intact`).
        self._dicts = [module.__dict__ for module, _, _, _ in installed]
        self._forwards = list(map(dict.get, self._dicts, repeat(_FORWARD)))
        # Each module's forward hooks and how many there were, then the global ones' count.
        self._hooks = [module._forward_hooks for module, _, _, _ in installed]
        self._hook_counts = [*map(len, self._hooks), len(_global_forward_hooks)]

    def intact(self) -> bool:
        """Whether every intercepted module still calls its interceptor as installed: no forward hook
        has been added or removed since (which may change which path its listeners take), and no
        `forward` set on one of the instances (which would bypass the interceptor and its listeners),
        unless it wraps the interceptor (`functools.wraps`: `__wrapped__`) or was removed again."""
        if [*map(len, self._hooks), len(_global_forward_hooks)] != self._hook_counts:
            return False
        if list(map(dict.get, self._dicts, repeat(_FORWARD))) == self._forwards:
            return True  # (the common case: one C-level pass, no Python call per module)
        return all(_interceptor_of(module.__dict__.get(_FORWARD)) is interceptor for module, interceptor, _, _ in self._installed)

    def remove(self) -> None:
        installed, self._installed = self._installed, []
        if not installed:
            return
        with _lock:
            entry_changes[0] += 1
            for module, interceptor, entry, kind in installed:
                setattr(interceptor, kind, _without(getattr(interceptor, kind), entry))
                if interceptor.listeners or interceptor.frames or interceptor.inputs or interceptor.outputs:
                    _bind(module, interceptor)
                    continue
                _unhook(interceptor)
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
    items: Iterable[tuple[nn.Module, Listener, Any]],
    frames: Iterable[tuple[nn.Module, Enter, Exit]] = (),
    edits: Iterable[tuple[nn.Module, str, InputEdit | OutputEdit]] = (),
) -> Interception:
    """For each `(module, listener, context)`, call `listener(context, args, kwargs, output)` after each
    call of the module's forward, around it each frame `(module, enter, exit)`, and each edit
    `(module, INPUTS or OUTPUTS, edit)` on what it receives or returns (module docstring), until the
    returned `Interception` is removed. One lock for all."""
    items, frames, edits = tuple(items), tuple(frames), tuple(edits)
    installed: list[tuple[nn.Module, _Interceptor, Any, str]] = []
    with _lock:
        entry_changes[0] += 1
        added: list[tuple[nn.Module, Any, str]] = [(m, (listener, context), _LISTENERS) for m, listener, context in items]
        added += [(m, (enter, exit), _FRAMES) for m, enter, exit in frames]
        added += [(m, edit, kind) for m, kind, edit in edits]
        for module, entry, kind in added:
            interceptor = _interceptor_on(module)
            setattr(interceptor, kind, getattr(interceptor, kind) + (entry,))
            installed.append((module, interceptor, entry, kind))
            _bind(module, interceptor)
    return Interception(installed)


def _interceptor_on(module: nn.Module) -> _Interceptor:
    """The module's interceptor, set as its `forward` if it has none yet (called holding `_lock`)."""
    own = module.__dict__
    shadowed = own.get(_FORWARD, _ABSENT)
    interceptor = None if shadowed is _ABSENT else _interceptor_of(shadowed)
    if interceptor is None:
        interceptor = _Interceptor(module.forward, shadowed)
        own[_FORWARD] = interceptor.bound()
    return interceptor
