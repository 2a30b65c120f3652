"""Interception on torch's own hooks: call listeners with a module's inputs and output, edit what it
receives and returns, and frame its calls.

Every mechanism here is a torch hook, so whatever pops or replaces a module's instance `forward`
(transformers' kernelize on `train()` / `eval()`, accelerate's `add_hook_to_module`) leaves it in
place, and `inspect.signature(module.forward)` is the module's own (what `generate` reads).

Each intercepted module has one *interceptor*, shared by every installation on it, which owns up to
three hooks, registered after the module's other hooks when it is installed:
- a forward pre-hook (with kwargs), for input edits (`inputs`: `(args, kwargs) -> (args, kwargs)`)
  and the frames' entries: the forward and every later hook get the edited arguments;
- a forward hook (with kwargs), for output edits (`outputs`: `output -> output`), then the listeners
  (`listener(context, args, kwargs, output)`), then the frames' exits: listeners see what the caller
  receives from the hooks registered before, after yamltrace's own edits;
- a last forward hook that torch calls also when the forward or a hook raised (`always_call`), which
  exits, unfinished, the frames the call entered and did not exit.
A *frame* is `enter(args, kwargs) -> token` before the forward and `exit(token, output, finished)`
after; frames enter in the order installed and exit in reverse. Hooks registered on the module after
an installation run after its listeners (torch's order); an installation joining an interceptor whose
hooks others' now follow registers the interceptor's hooks again, last.

`Interception.add` installs, and its `remove()` takes off exactly what it installed (a module
whose interceptor holds nothing more loses its hooks); installing is all or nothing, also under
KeyboardInterrupt. A copy of a module made while it is intercepted (`copy.deepcopy`, pickling) carries
hooks that pass everything through.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from threading import get_ident
from typing import Any

from torch import nn
from torch.compiler import is_dynamo_compiling
from torch.utils.hooks import RemovableHandle

__all__ = ["Listener", "Enter", "Exit", "InputEdit", "OutputEdit", "INPUTS", "OUTPUTS", "Interception"]

# Called after the module's forward returned: (its context, positional args, keyword args, output).
Listener = Callable[[Any, tuple[Any, ...], dict[str, Any], Any], None]
# Edits: of what the module receives (before its forward), of what it returns (before the listeners).
InputEdit = Callable[[tuple[Any, ...], dict[str, Any]], tuple[tuple[Any, ...], dict[str, Any]]]
OutputEdit = Callable[[Any], Any]
INPUTS, OUTPUTS = "inputs", "outputs"
# A frame: called before the forward with its (args, kwargs) (returns a token), and after it: (token, output, finished).
Enter = Callable[[tuple[Any, ...], dict[str, Any]], Any]
Exit = Callable[[Any, Any, bool], None]

# Serialises installs and removals (not calls: those read immutable tuples).
_lock = threading.Lock()
# What an `Interception` installs on an interceptor: the name of the tuple it joins.
_LISTENERS, _FRAMES = "listeners", "frames"


class _Interceptor:
    """One module's edits, listeners and frames, and the torch hooks that run them: `pre` (input
    edits, frames' entries), `after` (output edits, listeners, frames' exits) and `last` (frames'
    unfinished exits), each registered only while needed.

    The tuples are replaced, never mutated, so a running call sees one snapshot.
    """

    __slots__ = ("listeners", "frames", "inputs", "outputs", "pre", "post", "last", "pending")

    def __init__(self) -> None:
        self.listeners: tuple[tuple[Listener, Any], ...] = ()
        self.frames: tuple[tuple[Enter, Exit], ...] = ()
        self.inputs: tuple[InputEdit, ...] = ()
        self.outputs: tuple[OutputEdit, ...] = ()
        self.pre: RemovableHandle | None = None
        self.post: RemovableHandle | None = None
        self.last: RemovableHandle | None = None
        # The frames entered by calls running now and not exited, per thread (calls of one module in
        # one thread nest: the innermost is last).
        self.pending: dict[int, list[list[Any]]] = {}  # per thread: [frames, tokens, not exited yet]

    def empty(self) -> bool:
        return not (self.listeners or self.frames or self.inputs or self.outputs)

    def before(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        """The forward pre-hook: input edits, then the frames' entries (kept in `pending`)."""
        for edit in self.inputs:
            args, kwargs = edit(args, kwargs)
        frames = self.frames
        if frames:
            tokens: list[Any] = []
            try:
                for enter, _ in frames:
                    tokens.append(enter(args, kwargs))
            except BaseException:
                _exit_frames(frames[: len(tokens)], tokens, None, False)
                raise
            self._entered().append([frames, tokens, True])  # (True: not exited yet)
        return args, kwargs

    def _entered(self) -> list[list[Any]]:
        """This thread's calls with frames entered and not exited (compiled code: one list)."""
        key = 0 if is_dynamo_compiling() else get_ident()
        entered = self.pending.get(key)
        if entered is None:
            entered = self.pending[key] = []
        return entered

    def after(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> Any:
        """The forward hook: output edits, listeners, then the frames' exits with what the caller receives."""
        try:
            for edit in self.outputs:
                output = edit(output)
            for listener, context in self.listeners:
                listener(context, args, kwargs, output)
        except BaseException:
            self._exit(None, False)
            raise
        if self.pending:  # (frames entered: the common listener-only call has none)
            self._exit(output, True)
        return output

    def _exit(self, output: Any, finished: bool) -> None:
        """Exit the frames of this thread's innermost call, if it entered some; `unwound`, which torch
        calls next, drops it."""
        if self.pending:
            entered = self._entered()
            if entered and entered[-1][2]:
                call = entered[-1]
                call[2] = False
                _exit_frames(call[0], call[1], output, finished)

    def unwound(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        """The always-called hook, which torch calls right after `after` or, when the forward or a hook
        raised, instead of it: drops the call's frames, exiting them unfinished if `after` did not."""
        entered = self._entered()
        if entered:
            frames, tokens, open_ = entered.pop()
            if open_:
                _exit_frames(frames, tokens, None, False)

    def __deepcopy__(self, memo: dict[int, Any]) -> _Interceptor:
        return _Interceptor()  # registered nowhere: the copy's hooks pass everything through

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Interceptor, ())


def _exit_frames(frames: tuple[tuple[Enter, Exit], ...], tokens: list[Any], output: Any, finished: bool) -> None:
    """Each frame's exit with its entry's token, in reverse order."""
    for (_, exit), token in zip(frames[::-1], tokens[::-1]):
        exit(token, output, finished)


# The ids of yamltrace's own forward hooks that only observe (`Interception.observe`: `_padding`'s
# root-call hooks): an interceptor need not run after them.
_observers: set[int] = set()


def _interceptor_of(module: nn.Module) -> _Interceptor | None:
    """The module's interceptor, found among its forward hooks (torch's table is the one record of it)."""
    for key, hook in module._forward_hooks.items():
        owner = getattr(hook, "__self__", None)
        # (a copied module's hooks call a copy that is registered nowhere: not its interceptor)
        if type(owner) is _Interceptor and owner.post is not None and owner.post.id == key:
            return owner
    return None


def _runs_last(hooks: dict[int, Any], own: list[int]) -> bool:
    """Whether the hooks `own` (ids, in order) are the last of `hooks` that are not observers."""
    keys = [key for key in hooks if key not in _observers]
    return keys[-len(own) :] == own


def _bind(module: nn.Module, interceptor: _Interceptor, reorder: bool = True) -> None:
    """Register the hooks the interceptor's contents need and remove those it no longer needs; with
    `reorder`, register them again where others' hooks now run after them (called holding `_lock`)."""
    have = (interceptor.pre, interceptor.post, interceptor.last)
    if not (interceptor.listeners or interceptor.frames or interceptor.inputs or interceptor.outputs):  # (`empty()`)
        for handle in have:
            if handle is not None:
                handle.remove()
        interceptor.pre = interceptor.post = interceptor.last = None
        if module._forward_hooks or module._forward_pre_hooks:
            _purge(module, interceptor)  # (an emptied interceptor leaves no hook, held or not)
        return
    if have == _UNBOUND and not (interceptor.inputs or interceptor.frames):  # (the common case: listeners only)
        try:
            interceptor.post = module.register_forward_hook(interceptor.after, with_kwargs=True)
        except BaseException:
            _purge(module, interceptor)
            raise
        return
    wants = (bool(interceptor.inputs or interceptor.frames), True, bool(interceptor.frames))
    if interceptor.post is not None and all(h is not None for h, wanted in zip(have, wants) if wanted):
        if not (reorder and _overtaken(module, interceptor)):
            for name, handle, wanted in zip(_HOOKS, have, wants):
                if handle is not None and not wanted:
                    handle.remove()
                    setattr(interceptor, name, None)
            return
    try:
        interceptor.pre = module.register_forward_pre_hook(interceptor.before, with_kwargs=True) if wants[0] else None
        interceptor.post = module.register_forward_hook(interceptor.after, with_kwargs=True)
        if wants[2]:
            interceptor.last = module.register_forward_hook(interceptor.unwound, with_kwargs=True, always_call=True)
        else:
            interceptor.last = None
        for handle in have:
            if handle is not None:
                handle.remove()
    except BaseException:  # (the hooks it does not hold go, also when a registration was interrupted)
        _purge(module, interceptor)
        raise


def _purge(module: nn.Module, interceptor: _Interceptor) -> None:
    """Remove the hooks calling the interceptor that it does not hold (replaced ones, or one whose
    registration was interrupted before it was held)."""
    ids = {h.id for h in (interceptor.pre, interceptor.post, interceptor.last) if h is not None}
    for hooks in (module._forward_hooks, module._forward_pre_hooks):
        for key in [k for k, hook in hooks.items() if getattr(hook, "__self__", None) is interceptor and k not in ids]:
            hooks.pop(key, None)
            module._forward_hooks_with_kwargs.pop(key, None)
            module._forward_hooks_always_called.pop(key, None)
            module._forward_pre_hooks_with_kwargs.pop(key, None)


# The interceptor's hook fields, in the order `_bind` registers them; their values before any is.
_HOOKS = ("pre", "post", "last")
_UNBOUND = (None, None, None)


def _overtaken(module: nn.Module, interceptor: _Interceptor) -> bool:
    """Whether other (non-observer) hooks were registered on the module after the interceptor's."""
    own = [h.id for h in (interceptor.post, interceptor.last) if h is not None]
    if not _runs_last(module._forward_hooks, own):
        return True
    return interceptor.pre is not None and not _runs_last(module._forward_pre_hooks, [interceptor.pre.id])


class Interception:
    """Listeners, frames and edits installed together on several modules (`add`); `remove()` takes them
    all off (idempotent).

    What `add` installs is recorded here as it goes, so an owner that holds the `Interception` before
    calling `add` removes everything with it, whatever interrupted the installation.
    """

    __slots__ = ("_installed", "_counts", "_observers")

    def __init__(self, counted: bool = False) -> None:
        """`counted`: for an owner that keeps the installation and asks `intact()` later."""
        self._installed: list[tuple[nn.Module, _Interceptor, Any, str]] = []  # (module, its interceptor, entry, tuple)
        self._counts: list[int] | None = [] if counted else None  # the hook counts `intact` compares with
        self._observers: list[RemovableHandle] = []  # hooks of `observe`

    def observe(
        self,
        module: nn.Module,
        before: Callable[[nn.Module, tuple[Any, ...], dict[str, Any]], None],
        after: Callable[[nn.Module, tuple[Any, ...], dict[str, Any], Any], None],
    ) -> None:
        """Register `before` as a forward pre-hook and `after` as a forward hook that torch calls also
        when the forward raises, both with kwargs, as observers: they return None and change nothing a
        caller receives, so interceptors need not run after them."""
        self._observers.append(module.register_forward_pre_hook(before, with_kwargs=True))
        _observers.add(self._observers[-1].id)
        self._observers.append(module.register_forward_hook(after, with_kwargs=True, always_call=True))
        _observers.add(self._observers[-1].id)

    def add(
        self,
        items: Iterable[tuple[nn.Module, Listener, Any]] = (),
        frames: Iterable[tuple[nn.Module, Enter, Exit]] = (),
        edits: Iterable[tuple[nn.Module, str, InputEdit | OutputEdit]] = (),
    ) -> Interception:
        """For each `(module, listener, context)`, call `listener(context, args, kwargs, output)` after
        each call of the module's forward, around it each frame `(module, enter, exit)`, and each edit
        `(module, INPUTS or OUTPUTS, edit)` on what it receives or returns (module docstring). If
        installing raises (KeyboardInterrupt included), what this call installed is taken off again."""
        added: list[tuple[nn.Module, Any, str]] = [(m, (listener, context), _LISTENERS) for m, listener, context in items]
        added += [(m, (enter, exit), _FRAMES) for m, enter, exit in frames]
        added += [(m, edit, kind) for m, kind, edit in edits]
        installed = self._installed
        start = len(installed)
        with _lock:
            try:
                touched: dict[int, tuple[nn.Module, _Interceptor]] = {}
                for module, entry, kind in added:
                    found = touched.get(id(module))
                    if found is None:  # (a module without forward hooks has no interceptor)
                        found = touched[id(module)] = (
                            module,
                            module._forward_hooks and _interceptor_of(module) or _Interceptor(),
                        )
                    interceptor = found[1]
                    installed.append((module, interceptor, entry, kind))
                    setattr(interceptor, kind, getattr(interceptor, kind) + (entry,))
                for module, interceptor in touched.values():
                    _bind(module, interceptor)
            except BaseException:
                failed, installed[start:] = installed[start:], []
                _take_off(failed)
                raise
            if self._counts is not None:
                self._counts = _hook_counts(installed)
        return self

    def intact(self) -> bool:
        """Whether something is installed and no forward hook was added to or removed from an
        intercepted module since, so every listener still sees what the caller receives (an
        `Interception(counted=True)` only: the others do not count hooks as they install)."""
        return bool(self._installed) and self._counts is not None and _hook_counts(self._installed) == self._counts

    def remove(self) -> None:
        if self._installed:
            with _lock:
                _take_off(self._installed)
                self._installed = []
        while self._observers:
            handle = self._observers[-1]
            handle.remove()
            _observers.discard(handle.id)
            self._observers.pop()


def _hook_counts(installed: list[tuple[nn.Module, _Interceptor, Any, str]]) -> list[int]:
    return [len(module._forward_hooks) + len(module._forward_pre_hooks) for module, _, _, _ in installed]


def _take_off(installed: list[tuple[nn.Module, _Interceptor, Any, str]]) -> None:
    """Remove each installed entry from its interceptor, whose hooks then follow what it still holds
    (holding `_lock`)."""
    touched: dict[int, tuple[nn.Module, _Interceptor]] = {}
    for module, interceptor, entry, kind in installed:
        setattr(interceptor, kind, _without(getattr(interceptor, kind), entry))
        touched[id(interceptor)] = (module, interceptor)
    for module, interceptor in touched.values():
        _bind(module, interceptor, reorder=False)


def _without(entries: tuple[Any, ...], entry: Any) -> tuple[Any, ...]:
    if len(entries) == 1 and entries[0] is entry:
        return ()
    return tuple(x for x in entries if x is not entry)
