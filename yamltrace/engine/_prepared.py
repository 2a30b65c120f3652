"""Interceptions installed again and again: the listeners and frames of a `trace` run kept for its plan.

A block installs the same listeners and frames as the block before it on the same plan. Building an
interceptor per module and block (`intercept`) costs more than the block's forward hooks would
(figures: docs/performance.md); a `Prepared` builds each module's interceptor once and, per block,
only sets and deletes the module's `forward` entry, where nothing else intercepts or hooks it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import repeat
from operator import attrgetter
from typing import Any

from torch import nn
from torch.nn.modules.module import _global_forward_hooks
from torch.utils.hooks import RemovableHandle

from ._intercept import _FORWARD, _FRAMES, _LISTENERS, Enter, Exit, Interception, Listener, _Interceptor, _lock
from ._intercept import entry_changes, intercept

__all__ = ["Prepared"]

# A module's kept interceptor: (module, interceptor, its bound `forward`, listeners, frames).
_Kept = tuple[nn.Module, _Interceptor, Callable[..., Any], tuple[tuple[Listener, Any], ...], tuple[tuple[Enter, Exit], ...]]
_HOOKS = "_forward_hooks"


class Prepared:
    """Listeners and frames installed again and again, one installation at a time (a `trace` run
    kept for its plan installs the same ones for each block): `install()`, then `remove()`.

    Each module's interceptor is built once, its tuples holding exactly the module's entries. A module
    with no `forward` of its own and no forward hooks when installed (the common case) gets only its
    `forward` entry set, and deleted at removal while the interceptor still holds its entries alone.
    Any other module, and one whose interceptor others joined meanwhile, takes `intercept`'s way (its
    interceptor is then built again), so what a call sees is what `intercept` would have installed.
    When every module is in the common case, each step is one C-level pass over all of them; the
    class forwards are bound again only when one of them changed, the interceptors' entries are
    compared only when some interceptor's entries changed during the installation (`entry_changes`),
    and the modules' forward hooks are looked for only when a hook was registered anywhere since the
    last installation found none (torch numbers every registration: `RemovableHandle.next_id`; a hook
    put into a module's `_forward_hooks` by hand, without `register_forward_hook`, is not seen).
    """

    __slots__ = (
        "_kept",
        "_modules",
        "_interceptors",
        "_methods",
        "_dicts",
        "_entries",
        "_functions",
        "_changes",
        "_handles",
        "_fast",
        "_slow",
    )

    def __init__(self, items: Iterable[tuple[nn.Module, Listener, Any]], frames: Iterable[tuple[nn.Module, Enter, Exit]]) -> None:
        entries: dict[int, tuple[nn.Module, list[tuple[Listener, Any]], list[tuple[Enter, Exit]]]] = {}
        for module, listener, context in items:
            entries.setdefault(id(module), (module, [], []))[1].append((listener, context))
        for module, enter, exit in frames:
            entries.setdefault(id(module), (module, [], []))[2].append((enter, exit))
        self._kept = [_kept_interceptor(m, tuple(listeners), tuple(frames)) for m, listeners, frames in entries.values()]
        self._columns()
        self._fast: list[_Kept] = []  # installed by setting `forward` (`_kept` itself when all are)
        self._slow: Interception | None = None  # installed by `intercept`
        self._changes = -1  # `entry_changes` when all were installed by setting `forward`
        self._handles = -1  # `RemovableHandle.next_id` when the modules last had no forward hooks

    def _columns(self) -> None:
        """The kept interceptors' fields as lists, for the passes over all of them (each module's
        `__dict__` too: an `nn.Module` keeps its own for life)."""
        columns = list(zip(*self._kept)) or [()] * 5
        self._modules, self._interceptors, self._methods, listeners, frames = map(list, columns)
        self._dicts: list[dict[str, Any]] = [module.__dict__ for module in self._modules]
        self._entries = list(zip(listeners, frames))
        self._functions: list[Any] = []  # the class forwards the interceptors' `inner` are bound from (none yet)

    def install(self) -> None:
        """Install every listener and frame (`intercept`'s semantics)."""
        with _lock:
            # Forward hooks are looked for again only if any hook was registered anywhere since the last
            # installation found none (each registration takes the next `RemovableHandle` id).
            handles = RemovableHandle.next_id
            if _global_forward_hooks or handles != self._handles and any(map(dict.get, self._dicts, repeat(_HOOKS))):
                slow = self._install_each()
            else:
                self._handles = handles
                # The class forwards, bound again if one changed since the last block, then ours where
                # the module has no `forward` of its own (one that has takes `intercept`'s way).
                functions = list(map(getattr, map(type, self._modules), repeat(_FORWARD)))
                if functions != self._functions:
                    list(map(setattr, self._interceptors, repeat("inner"), map(_bound, functions, self._modules)))
                    self._functions = functions
                found = list(map(dict.setdefault, self._dicts, repeat(_FORWARD), self._methods))
                if found == self._methods:  # (each is ours: compared by identity first, in C)
                    self._fast, slow = self._kept, []
                    self._changes = entry_changes[0]
                else:
                    self._fast = [k for k, value in zip(self._kept, found) if value is k[2]]
                    slow = [k for k, value in zip(self._kept, found) if value is not k[2]]
        if slow:
            self._slow = intercept([(k[0], *e) for k in slow for e in k[3]], [(k[0], *e) for k in slow for e in k[4]])

    def _install_each(self) -> list[_Kept]:
        """`install` where forward hooks run: module by module; returns those for `intercept`."""
        slow = []
        for kept, own in zip(self._kept, self._dicts):
            module = kept[0]
            if _global_forward_hooks or _FORWARD in own or module._forward_hooks:
                slow.append(kept)
                continue
            kept[1].inner = module.forward
            own[_FORWARD] = kept[2]
            self._fast.append(kept)
        return slow

    def remove(self) -> None:
        """Remove what `install` installed (idempotent)."""
        fast, self._fast = self._fast, []
        slow, self._slow = self._slow, None
        joined = []
        with _lock:
            # Ours alone: its listeners and frames ours (others who joined would have added theirs: no
            # entry changed anywhere since the installation, or the entries compared), and its `forward`
            # ours (edits or the slower path would have set `edited`, `_bind`; a wrapper set over it is
            # put back).
            if fast is self._kept and (
                entry_changes[0] == self._changes or list(map(_entries, self._interceptors)) == self._entries
            ):
                found: list[Any] = list(map(dict.pop, self._dicts, repeat(_FORWARD), repeat(None)))
                if found != self._methods:
                    for kept, own, value in zip(self._kept, self._dicts, found):
                        if value is not kept[2]:
                            if value is not None:
                                own[_FORWARD] = value
                            joined.append(kept)
                fast = []
            for kept in fast:
                module, interceptor, method, listeners, frames = kept
                own = module.__dict__
                if own.get(_FORWARD) is method and interceptor.listeners == listeners and interceptor.frames == frames:
                    del own[_FORWARD]
                else:
                    joined.append(kept)
        if slow is not None:
            slow.remove()
        if joined:
            self._renew(joined)

    def _renew(self, joined: list[_Kept]) -> None:
        """Others joined these interceptors, or set `forward` over them: removed as `intercept`'s are;
        the modules get new interceptors for the next installation."""
        entries = [(k[0], k[1], entry, _LISTENERS) for k in joined for entry in k[3]]
        Interception(entries + [(k[0], k[1], entry, _FRAMES) for k in joined for entry in k[4]]).remove()
        renewed = {id(k): _kept_interceptor(k[0], k[3], k[4]) for k in joined}
        self._kept = [renewed.get(id(k), k) for k in self._kept]
        self._columns()


_entries = attrgetter(_LISTENERS, _FRAMES)


def _bound(function: Any, module: nn.Module) -> Any:
    """The class attribute `function` as `module.forward` reads it where the module has no `forward` of its own."""
    get = getattr(type(function), "__get__", None)
    return function if get is None else get(function, module, type(module))


def _kept_interceptor(
    module: nn.Module, listeners: tuple[tuple[Listener, Any], ...], frames: tuple[tuple[Enter, Exit], ...]
) -> _Kept:
    """An interceptor for `Prepared`, holding the module's listeners and frames (`inner` set at install)."""
    interceptor = _Interceptor(module.forward)
    interceptor.listeners, interceptor.frames = listeners, frames
    return (module, interceptor, interceptor.bound(), listeners, frames)
