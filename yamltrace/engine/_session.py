"""One capture session: what is recording in this context, which flags ask for it, and the tie-last rule.

Both entry points use it: a `capture_outputs` forward opens a *forward* session, a `trace` block a
*block* session. A forward session records while it is the innermost decorated forward running in
the calling context, so a nested decorated forward shadows its parent's (transformers' rule); a
block session records while its block is open in the calling context. Contexts are `ContextVar`s,
so threads (and asyncio tasks) never see each other's captures. torch.compile cannot read a
`ContextVar`: while it traces, a block session records while its block is open, from any thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextvars import ContextVar, Token
from typing import Any, cast

from torch import nn
from torch.compiler import is_dynamo_compiling

from ._collector import Collector, ScopeGate, Transform, innermost_forward, open_blocks, session_records

__all__ = [
    "FLAG_ALIASES",
    "Session",
    "forward_context",
    "NO_CAPTURE",
    "active_sessions",
    "requested_flags",
    "config_attribute",
    "plain_config_lookup",
    "decorator_tie_last",
    "tie_last_enabled",
    "tie_last_hidden_state",
]

# Keys switched on by another key's flag (transformers' backward-compatible aliases).
FLAG_ALIASES = {"cross_attentions": "attentions", "mask_decoder_attentions": "attentions"}
_UNSET = object()


class Session:
    """One capture's collector, and whether it records the call being made now (`recording()`).

    A trace block also keeps `scopes`, the stack of its capture scopes (see `_trace_plan`, by their number
    in the trace) running now in the context that records: hooks of a scope record only while it is
    the innermost (`scope_gate`), so a nested scope shadows its parent, as a nested decorated forward
    does in transformers. Numbers, not objects: torch.compile guards on them by value, so a new block
    reuses the graphs compiled for the previous one.
    """

    __slots__ = ("collector", "block", "open", "scopes")

    def __init__(self, collector: Collector, *, block: bool) -> None:
        self.collector = collector
        self.block = block  # a trace block (True) or a decorated forward (False)
        self.open = True
        self.scopes: list[int] = []

    # Whether hooks record into this session for the current call (the module docstring; the rule
    # lives beside the listeners that test it inline: `_collector.session_records`).
    recording = session_records

    def scope_gate(self, scope: int, collector: Collector) -> ScopeGate:
        """What hooks of scope number `scope` record into, and when: `collector`, while this block
        records and that scope is the innermost of its scopes running (`_collector.ScopeGate`)."""
        return ScopeGate(collector, self, self.scopes, scope)

    def push_scope(self, scope: int) -> None:
        """A call of scope number `scope` starts: it is the innermost running until `pop_scope`."""
        self.scopes.append(scope)

    def pop_scope(self) -> None:
        """The innermost running scope's call ends (nothing when none runs: a step cut it off)."""
        if self.scopes:
            self.scopes.pop()

    def clear_scopes(self) -> None:
        """No scope runs any more (a step ended, or was cut off by an exception)."""
        del self.scopes[:]

    def enter(self) -> Token[Any]:
        """Start recording in this context; pass the token to `exit`."""
        if self.block:
            return open_blocks.set(open_blocks.get() + (self,))
        return innermost_forward.set(self)

    def exit(self, token: Token[Any]) -> None:
        """Stop recording: restore what was active in this context before `enter`."""
        if self.block:
            self.close()
            open_blocks.reset(token)
        else:
            self.open = False  # (its forward has ended: held hooks need not wait for its `finish`)
            innermost_forward.reset(token)

    def close(self) -> None:
        """A block session's block has ended: it records nothing more, in any context."""
        self.open = False


def forward_context() -> ContextVar[Any]:
    """The context variable a forward session records by: it records while it is the value
    (`Session.recording`). Hooks serving forward sessions (`_collector.Sessions`) test it inline."""
    return innermost_forward


def active_sessions() -> tuple[Session, ...]:
    """The sessions recording in this context: the innermost decorated forward's, then open trace blocks.

    For diagnostics and tests: after every capture has ended (also by an exception) it is empty.
    """
    forward = innermost_forward.get()
    return ((forward,) if forward is not None and forward is not NO_CAPTURE else ()) + open_blocks.get()


# Entered by a decorated forward that captures nothing: it shadows an outer forward's session, so
# modules that run inside it record nothing for the outer model (transformers' rule).
NO_CAPTURE = Session(Collector(()), block=False)


def config_attribute(config: Any, name: str, default: Any) -> Any:
    """`getattr(config, name, default)`; on transformers' configs, without their Python `__getattribute__`.

    Capture reads a few config attributes on every forward. transformers' `PreTrainedConfig`
    renames through `attribute_map`, then does `object`'s lookup, in Python (costly, a missing name
    most: it raises through its frame; docs/performance.md). For a config class whose lookup is
    exactly that (`plain_config_lookup`), the same lookup is done by `object.__getattribute__`;
    while dynamo traces (it cannot trace that call), and for any other class, by `getattr`.
    """
    lookup = plain_config_lookup(type(config))
    if lookup is None or is_dynamo_compiling():
        return getattr(config, name, default)
    if lookup:  # transformers' lookup: its `attribute_map` first, read as it reads it
        name = _OBJECT_LOOKUP(config, "attribute_map").get(name, name)
    try:
        if getattr(type(config), name, _UNSET) is _UNSET:  # no class attribute: the instance's (a miss raises nothing)
            return _OBJECT_LOOKUP(config, "__dict__").get(name, default)
        return _OBJECT_LOOKUP(config, name)
    except AttributeError:  # (no instance `__dict__`, or a descriptor that raises)
        return default


def plain_config_lookup(cls: type) -> bool | None:
    """How instances of `cls` look attributes up, when it is plain: False for `object`'s lookup,
    True for transformers' `PreTrainedConfig`'s (`attribute_map`, then `object`'s); None for any
    other lookup, or a class with `__getattr__` (memoised per class)."""
    lookup = _LOOKUPS.get(cls, _UNSET)
    if lookup is _UNSET:
        getattribute: Any = cls.__getattribute__
        lookup = None
        if not hasattr(cls, "__getattr__"):
            if getattribute is object.__getattribute__:
                lookup = False
            elif (
                getattr(getattribute, "__qualname__", "")
                in ("PreTrainedConfig.__getattribute__", "PretrainedConfig.__getattribute__")
                and getattr(getattribute, "__module__", "") == "transformers.configuration_utils"
            ):
                lookup = True
        _LOOKUPS[cls] = lookup
    return cast("bool | None", lookup)


_OBJECT_LOOKUP = object.__getattribute__
_LOOKUPS: dict[type, Any] = {}


# The flag name of each key seen (one string object each: its hash is computed once).
_FLAG_NAMES: dict[str, str] = {}


def requested_flags(keys: Iterable[str], kwargs: Mapping[str, Any], config: Any) -> dict[str, Any]:
    """The truthy `output_<key>` flag of each key: kwargs first, then config; aliases follow their source."""
    flags = {}
    for key in keys:
        name = _FLAG_NAMES.get(key)
        if name is None:
            if len(_FLAG_NAMES) >= 1024:  # keys come from capture maps and specs: a bound all the same
                _FLAG_NAMES.clear()
            name = _FLAG_NAMES[key] = f"output_{FLAG_ALIASES.get(key, key)}"
        value = kwargs.get(name, _UNSET)
        if value is _UNSET:
            value = config_attribute(config, name, False)
        if value:
            flags[key] = value
    return flags


def tie_last_enabled(config: Any, options: Mapping[str, Any], decorator_default: bool | None) -> bool:
    """Whether the last hidden state is tied: `config.tie_last_hidden_states` when set, else the
    spec's `tie_last_hidden_states` option, else the capture decorator's argument, else True."""
    from_config = config_attribute(config, "tie_last_hidden_states", None)
    if from_config is not None:
        return bool(from_config)
    if options.get("tie_last_hidden_states") is not None:
        return bool(options["tie_last_hidden_states"])
    return True if decorator_default is None else decorator_default


def tie_last_hidden_state(hidden_states: list[Any], output: Any, transform: Transform | None = None) -> None:
    """Replace the last captured hidden state by the output's final one (post norm), in place.

    `transform` is what the recorder did to the value it replaces (detach, move, cast).
    """
    if not hidden_states or hidden_states[-1] is None:
        return
    for field in ("vision_hidden_states", "last_hidden_state"):
        if hasattr(output, field):
            final = getattr(output, field)
        elif isinstance(output, dict) and field in output:
            final = output[field]
        else:
            continue
        hidden_states[-1] = final if transform is None else transform(final)
        return


def decorator_tie_last(model: nn.Module | type[nn.Module]) -> bool | None:
    """The `tie_last_hidden_states` argument of the capture decorator on the model class's `forward`.

    Reads yamltrace's marker, or the closure of transformers' `capture_outputs` wrapper; None if the
    forward has no capture decorator.
    """
    func = getattr(model if isinstance(model, type) else type(model), "forward", None)
    while func is not None:
        marker = getattr(func, "__yamltrace_tie_last_hidden_states__", None)
        if marker is not None:
            return bool(marker)
        code = getattr(func, "__code__", None)
        if code is not None and "tie_last_hidden_states" in code.co_freevars and func.__closure__:
            cell = func.__closure__[code.co_freevars.index("tie_last_hidden_states")]
            return bool(cell.cell_contents)
        func = getattr(func, "__wrapped__", None)
    return None
