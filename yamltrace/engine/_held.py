"""Hooks a decorated model keeps between consecutive capturing forwards, until a forward without capture.

A `capture_outputs` forward that captures takes its hooks from `hold_hooks`: the first one installs
them, later ones with the same keys reuse them while the plan still describes the model
(`PlanGuard`: no structure change since, see `_plan`), so an evaluation loop pays neither a walk of
the model nor installing and removing per forward. `release_hooks` (called by every
decorated forward that captures nothing, and public as `yamltrace.release_hooks`) removes them; so
does the model's collection. Between two capturing forwards the hooked modules carry hooks
that record nothing (no session of theirs is running). Each capturing forward starts and finishes
its session on the held hooks; concurrent forwards of one model (threads) each record their own.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable
from typing import Any

from torch import nn

from ._collector import Sessions, install_hooks
from ._intercept import Interception
from ._plan import plan_hooks
from .._recorder import OutputRecorder
from ._session import forward_context

__all__ = ["HeldHooks", "hold_hooks", "release_hooks", "held_hooks"]

# Held hooks by id(root). They hold no strong reference to the root: a weakref.finalize on the root
# queues its entry in `_collected` when the root is collected, and the next `hold_hooks`,
# `release_hooks` or `held_hooks` releases it (`_drain`) before anything else. The finalizer only
# appends: it runs wherever the garbage collector runs, possibly while this thread holds `_lock` or
# the interception lock, so taking either there would deadlock.
_held: dict[int, HeldHooks] = {}
_collected: list[tuple[int, HeldHooks]] = []
_lock = threading.Lock()


class HeldHooks(Sessions):
    """The hooks of one model for one set of keys, and the capturing forwards using them now."""

    __slots__ = ("key", "guard", "interception", "finalizer", "released")

    def __init__(self, key: tuple[Any, ...], guard: Any) -> None:
        super().__init__(forward_context())
        self.key = key
        self.guard = guard
        self.interception = Interception(counted=True)  # (`intact` asked before each reuse)
        self.finalizer: Any = None
        self.released = False  # removed from `_held`; the last running forward removes the hooks

    def finish(self, session: Any) -> None:
        """A capturing forward ended (also by an exception)."""
        with _lock:
            sessions = self.sessions
            # One forward running: the common case, without a generator.
            self.sessions = () if sessions == (session,) else tuple(s for s in sessions if s is not session)
            remove = self.released and not self.sessions
        if remove:
            self.interception.remove()


def hold_hooks(root: nn.Module, tasks: tuple[tuple[str, OutputRecorder], ...], keys: Iterable[str], session: Any) -> HeldHooks:
    """Start `session` (a capturing forward of `root` recording `keys` of its own map's tasks, nested
    maps followed) on the held hooks when they still fit, else on new ones, held from now on.
    Call `finish(session)` on the result when the forward ends."""
    _drain()
    key = (tasks, tuple(keys))
    with _lock:
        held = _held.get(id(root))
        # The plan still describes the model, and no instance `forward` set since bypasses a hook.
        if held is not None and held.key == key and held.guard.holds(root) and held.interception.intact():
            held.sessions = held.sessions + (session,)
            return held
    if held is not None:
        release_hooks(root)
    plan, guard = plan_hooks(root, tasks, nested_maps=True, keys=key[1], guarded=True)
    held = HeldHooks(key, guard)
    held.sessions = (session,)
    # Hooks on the root itself would keep it alive: not held, removed when this forward finishes.
    held.released = any(module is root for module, _, _ in plan)
    try:
        install_hooks(plan, held, held.interception)
        if not held.released:
            held.finalizer = weakref.finalize(root, _collected.append, (id(root), held))
            with _lock:
                previous = _held.get(id(root))
                _held[id(root)] = held
            if previous is not None:  # another thread installed some meanwhile
                _release(previous)
        return held  # (inside `try`: an interruption before the caller has the hooks removes them)
    except BaseException:
        _forget(id(root), held)
        held.interception.remove()
        raise


def release_hooks(model: nn.Module) -> None:
    """Remove the hooks `model` keeps from its last capturing forward (nothing if it keeps none).

    Capturing forwards running now keep recording; the last of them removes the hooks.
    """
    _drain()
    if _held:
        _forget(id(model))


def held_hooks(model: nn.Module) -> bool:
    """Whether `model` keeps hooks from a capturing forward (for tests and diagnostics)."""
    _drain()
    return id(model) in _held


def _drain() -> None:
    """Release the held hooks of roots collected since the last call (see `_collected`)."""
    while _collected:
        key, held = _collected.pop()
        with _lock:
            if _held.get(key) is held:
                del _held[key]
        _release(held)


def _forget(key: int, only: HeldHooks | None = None) -> None:
    """Release the hooks held for root `key` (`only`: if they are those). Removed before they are
    forgotten, so an interrupted removal leaves them to the next release."""
    held = _held.get(key)
    if held is not None and (only is None or held is only):
        _release(held)
        with _lock:
            if _held.get(key) is held:
                del _held[key]


def _release(held: HeldHooks) -> None:
    with _lock:
        held.released = True
        remove = not any(session.open for session in held.sessions)  # (a forward that ended is not waited for)
    if held.finalizer is not None:
        held.finalizer.detach()
    if remove:
        held.interception.remove()
