"""The run of a `trace` block: the recording state of one block, built from its plan (`_trace_plan`).

A `TraceRun` owns a block session, one collector per exposed scope and the block's steps (one per
finished call of the traced module). The modules of the plan play *roles* around each call, as
frames (`_intercept`): the traced module delimits steps, each scope's module marks the scope
running (`Session.push_scope`) and starts the scope's call (`Collector.begin_call`), each tie point
ties the last hidden state at its exit. The roles are the run's methods; each changes the session
and collectors through their own methods only.

A run serves one block: its listeners, frames, session and collectors are built for the block,
installed at its start and removed at its end.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import Token
from functools import partial
from typing import Any

from torch import nn

from ._collector import Collector, hook_listeners
from ._intercept import Interception
from ._padding import PaddingWatch
from ._padding import warning_state
from ._session import Session, tie_last_hidden_state
from ._trace_plan import TracePlan

__all__ = ["TraceRun"]

Entered = Callable[[], None]
Exited = Callable[[Any, bool], None]


class TraceRun:
    """What one `trace` block records: `lists[name]` (values) and `paths[name]` (the module path of
    each) for each output of the plan, `ends`, where each finished step ends in them, and `calls`, how
    many steps finished in the whole block (`take` does not reset it).

    Steps are kept in place (no new containers inside the hooks, which torch.compile may trace): a
    finished step moves the step starts to the lists' ends; an unfinished one is cut off.
    """

    def __init__(self, plan: TracePlan, padding: PaddingWatch | None) -> None:
        """A run of `plan`; `padding`: its padding watch (`plan_watch(plan)`: None where no recorder keeps positions)."""
        self.plan = plan
        self.session = Session(Collector(()), block=True)
        self.collectors = {s.number: Collector(s.keys, dict(s.selections)) for s in plan.scopes if s.exposed}
        self.padding = padding
        # What `never_ran` and `silent_outputs` ask of each output: its name, key, collector, the paths of its modules.
        self._modules = [(o.name, o.key, self.collectors[o.scope], paths) for o, paths in zip(plan.outputs, plan.modules)]
        self._interception: Interception | None = None  # the listeners and frames, while a block records
        self._warned: list[bool] = [False]  # the padding warning's state of this block (`_padding.warning_state`)
        self._token: Token[Any] | None = None  # from `session.enter`, while the block records
        self._outputs = [(o.name, self.collectors[o.scope], o.key) for o in plan.outputs]  # (read by `_empty`)
        self.calls = 0
        self._empty()

    def _empty(self) -> None:
        """Nothing recorded yet: the outputs' lists are the collectors' (new) lists."""
        lists: dict[str, list[Any]] = {}
        paths: dict[str, list[str]] = {}
        for name, collector, key in self._outputs:  # (a loop, not comprehensions: once per block)
            lists[name] = collector.lists[key]
            paths[name] = collector.paths[key]
        self.lists, self.paths = lists, paths
        self.ends: list[tuple[int, ...]] = []
        self._step_starts = dict.fromkeys(lists, 0)
        self._ties: list[int] = []
        self._depth = 0

    def start(self, outer: nn.Module) -> None:
        """Install the plan's hooks and frames (`outer`: the module whose calls are steps) and start
        recording in this context, until `stop` (which is also what undoes a `start` that raised)."""
        self._token = None
        if self.padding is not None:
            self._warned = warning_state()  # one warning per block (per `extract` run: `shared_warning`)
        items, frames = self._prepare(outer)
        self._interception = Interception()  # (held before anything is installed: `stop` removes what was)
        self._interception.add(items, frames)
        self._token = self.session.enter()

    def stop(self) -> None:
        """Stop recording (in every context), then remove the hooks and frames."""
        try:
            if self._token is not None:
                self.session.exit(self._token)  # (which closes the session)
                self._token = None
        finally:
            if self.session.open:
                self.session.close()
            if self._interception is not None:
                self._interception.remove()
                self._interception = None

    def _prepare(self, outer: nn.Module) -> tuple[list[Any], list[Any]]:
        """The listeners and frames for a block whose steps are calls of `outer`."""
        items = []
        for scope in self.plan.scopes:
            if scope.exposed and scope.hooks:
                gate = self.session.scope_gate(scope.number, self.collectors[scope.number])
                items += hook_listeners(list(scope.hooks), gate)
        frames = self._frames(outer)
        if self.padding is not None and self.padding.aware:  # first: every role of the call knows the mask
            frames.insert(0, (outer, *self.padding.frame(outer, self.session.recording, self.warning)))
        return items, frames

    def warning(self) -> list[bool]:
        """The padding warning's state of the block running now (`_padding.PaddingWatch`)."""
        return self._warned

    def take(self) -> dict[str, tuple[Any, ...]]:
        """What the finished steps recorded, by output name, and forget it: the lists start over empty
        in place (the listeners, frames and the block's `Captures` hold them), so a block that runs on
        holds one step's values at a time. Between calls of the traced module only."""
        if self._depth:
            raise RuntimeError("TraceRun.take: a call of the traced module is running; take between calls.")
        taken = {}
        for name, values in self.lists.items():
            taken[name] = tuple(values[: self._step_starts[name]])  # (a scope called outside a step: not kept)
            del values[:]
            del self.paths[name][:]
        self._step_starts = dict.fromkeys(self.lists, 0)
        del self.ends[:]
        return taken

    def _frames(self, outer: nn.Module) -> list[tuple[nn.Module, Callable[..., Any], Callable[[bool, Any, bool], None]]]:
        """One frame per module with roles: entries in the order added, exits in reverse."""
        roles: dict[int, tuple[nn.Module, list[Entered], list[Exited]]] = {}

        def add(module: nn.Module, entered: Entered, exited: Exited) -> None:
            _, entries, exits = roles.setdefault(id(module), (module, [], []))
            entries.append(entered)
            exits.insert(0, exited)

        add(outer, self.enter_step, self.exit_step)
        for scope in self.plan.scopes:
            collector = self.collectors.get(scope.number)
            add(scope.module, partial(self.enter_scope, scope.number, collector), self.exit_scope)
            if collector is not None and "hidden_states" in collector.lists:
                for tie in scope.ties:
                    add(tie.module, partial(self.enter_tie, collector), partial(self.exit_tie, collector, tie.enabled))
        # Literal positions only: the root call is checked for padding first, in `outer`'s own frame.
        watch = self.padding
        check = None if watch is None or watch.aware else partial(self.check_padding, watch, outer)
        return [
            (module, *_frame(self.session.recording, entries, exits, check if module is outer else None))
            for module, entries, exits in roles.values()
        ]

    def check_padding(self, watch: PaddingWatch, outer: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """A call of the traced module starts: its literal positions are checked against its padding."""
        watch.check(outer, args, kwargs, self._warned)

    def enter_step(self) -> None:
        """A call of the traced module starts (the outermost one starts a step)."""
        if self._depth == 0:
            self._discard_unfinished()
        self._depth += 1

    def exit_step(self, output: Any, finished: bool) -> None:
        """A call of the traced module ends; the outermost one, if it did not raise, ends its step."""
        if self._depth == 0:
            return
        if finished and self._depth == 1:
            self.calls += 1
            self.ends.append(tuple(map(len, self.lists.values())))
            for name, values in self.lists.items():
                self._step_starts[name] = len(values)
        self._depth -= 1
        if self._depth == 0 and not finished:  # (a finished step leaves nothing: its scopes and ties exited)
            self._discard_unfinished()

    def _discard_unfinished(self) -> None:
        for name, values in self.lists.items():
            start = self._step_starts[name]
            if len(values) > start:  # (the common case, a finished step, has nothing to cut)
                del values[start:]
                del self.paths[name][start:]
        if self.session.scopes:  # (none running: the common case, a step starting after a finished one)
            self.session.clear_scopes()
        if self._ties:
            del self._ties[:]

    def enter_scope(self, number: int, collector: Collector | None) -> None:
        """A call of scope `number` starts: it shadows its parent; its positions count from here."""
        self.session.push_scope(number)
        if collector is not None:
            collector.begin_call()

    def exit_scope(self, output: Any, finished: bool) -> None:
        """A call of the innermost running scope ends."""
        self.session.pop_scope()

    def enter_tie(self, collector: Collector) -> None:
        """A call of a tie point starts: what it records follows the hidden states recorded so far."""
        self._ties.append(len(collector.lists["hidden_states"]))

    def exit_tie(self, collector: Collector, enabled: bool, output: Any, finished: bool) -> None:
        """A call of a tie point ends: its last recorded hidden state becomes its output's final one."""
        if self._ties:
            values = collector.lists["hidden_states"]
            mark = self._ties.pop()
            if enabled and output is not None and len(values) > mark:
                tie_last_hidden_state(values, output, collector.last_transform.get("hidden_states"))

    def silent_outputs(self) -> dict[str, list[Any]]:
        """The outputs whose modules ran and gave None where they read (`Collector.silent`), so the
        block can say why they are empty; `hidden_states` and keys with a layer selection (which hold
        None for unselected layers on purpose) left out."""
        silent = {}
        for name, key, collector, paths in self._modules:
            if key == "hidden_states" or key in collector.selections:
                continue
            if collector.silent and not collector.silent.isdisjoint(paths):
                silent[name] = self.lists[name]
        return silent

    def never_ran(self) -> dict[str, tuple[str, ...]]:
        """The outputs that recorded nothing because none of their modules ran (no hook of theirs fired,
        none gave None), with those modules' paths: a path of the model that skips them (a fused
        kernel), or calls that ran no hooks (code compiled before the block)."""
        idle = {}
        for name, _, collector, paths in self._modules:
            if paths and not self.lists[name] and collector.silent.isdisjoint(paths):
                idle[name] = paths
        return idle


def _frame(
    is_active: Callable[[], bool],
    entries: list[Entered],
    exits: list[Exited],
    check: Callable[[tuple[Any, ...], dict[str, Any]], None] | None = None,
) -> tuple[Callable[[tuple[Any, ...], dict[str, Any]], bool], Callable[[bool, Any, bool], None]]:
    """One module's frame (`_intercept`): its roles' entries and exits, for calls made while the block
    records; `check(args, kwargs)` first, if given (it may raise: nothing is entered then)."""

    def enter(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        active = is_active()
        if active:
            if check is not None:
                check(args, kwargs)
            for entered in entries:
                entered()
        return active

    def exit(active: bool, output: Any, finished: bool) -> None:
        if active:
            for exited in exits:
                exited(output, finished)

    return enter, exit
