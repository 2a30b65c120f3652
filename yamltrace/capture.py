"""`capture_outputs`: the forward decorator that records submodule outputs into a model's output.

Same contract as transformers 5.x: flags `output_<key>` come from the forward's kwargs, else from the
config; captured lists become tuples on the returned `ModelOutput`. Hooks are installed by a forward
that requests capture and stay for the next ones; the first forward without capture removes them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

import torch
from torch import nn
from torch.compiler import is_compiling

from .engine import (
    NO_CAPTURE,
    Collector,
    PaddingWatch,
    Session,
    attached_spec,
    config_attribute,
    hold_hooks,
    normalized_tasks,
    own_output_map,
    position_counter,
    release_hooks,
    requested_flags,
    resolve_selections,
    tasks_watch,
    tie_last_enabled,
    tie_last_hidden_state,
    warning_state,
)

__all__ = ["capture_outputs"]

F = TypeVar("F", bound=Callable[..., Any])


def _spec_options(model: nn.Module) -> Mapping[str, Any]:
    """The options of the spec `from_pretrained` attached to `model`."""
    spec = attached_spec(model)
    return spec.options if spec is not None else _NO_OPTIONS


_NO_OPTIONS: Mapping[str, Any] = {}


def capture_outputs(func: F | None = None, *, tie_last_hidden_states: bool = True) -> Any:
    """Decorate a base model's `forward` so it records the outputs its `_can_record_outputs` declares.

    Use bare (`@capture_outputs`) or with arguments (`@capture_outputs(tie_last_hidden_states=False)`
    for models whose last hidden state must stay the pre-norm one). `config.tie_last_hidden_states`,
    when set, overrides the argument, and so does the `tie_last_hidden_states` option of a spec
    attached by `from_pretrained`.

    Args:
        func: the `forward` to decorate (given when used bare).
        tie_last_hidden_states: replace the last captured hidden state by the output's
            `last_hidden_state` (default True).

    The decorated forward reads `output_<key>` for each key of the map from its keyword arguments,
    else from `self.config`; a key switched on gets a tuple on the returned output (docs/capture.md).
    """

    def decorate(forward: F) -> F:
        @functools.wraps(forward)
        def wrapper(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
            config = getattr(self, "config", None)
            return_dict = kwargs.pop("return_dict", config_attribute(config, "return_dict", True))
            output_map = own_output_map(self)
            output_map = output_map if isinstance(output_map, Mapping) else {}
            flags = requested_flags(output_map, kwargs, config)
            if is_compiling():
                if flags:
                    # Without fullgraph, dynamo runs the capture below eagerly after this break;
                    # with it, this message is the error (a literal: dynamo shows no other).
                    torch._dynamo.graph_break(
                        "yamltrace: capture_outputs cannot capture inside a torch.compile(fullgraph=True) graph "
                        "(it sets up its hooks per forward). Compile without fullgraph, or call the compiled model "
                        "inside `with yamltrace.trace(model)`, whose hooks are set up before compilation."
                    )
                else:
                    # torch.compile cannot trace a ContextVar; compiled code records nothing here anyway.
                    outputs = forward(self, *args, **kwargs)
                    return outputs.to_tuple() if return_dict is False else outputs
            if not flags:
                release_hooks(self)  # hooks held since the last capturing forward (docs/capture.md)
                token = NO_CAPTURE.enter()
                try:
                    outputs = forward(self, *args, **kwargs)
                finally:
                    NO_CAPTURE.exit(token)
                return outputs.to_tuple() if return_dict is False else outputs

            outputs = _capturing_call(forward, self, args, kwargs, output_map, flags, tie_last_hidden_states)
            return outputs.to_tuple() if return_dict is False else outputs

        # Read by engine/_session (the tie-last rule) to find the decorated forward's own setting.
        wrapper.__yamltrace_tie_last_hidden_states__ = tie_last_hidden_states  # type: ignore[attr-defined]
        return cast(F, wrapper)  # functools.wraps keeps the signature of `forward`

    if func is not None:
        return decorate(func)
    return decorate


def _capturing_call(
    forward: Callable[..., Any],
    self: nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    output_map: Mapping[str, Any],
    flags: Mapping[str, Any],
    tie_last_hidden_states: bool,
) -> Any:
    """One capturing call of a decorated forward: hooks held, the forward run in a session, each
    recorded key set on the output (the last hidden state tied by the tie-last rule)."""
    config = getattr(self, "config", None)
    tasks = normalized_tasks(output_map)
    selections = resolve_selections(tasks, flags, flags.get("hidden_states"), position_counter(config))
    session = Session(Collector(flags, selections), block=False)
    padding = tasks_watch(tasks)  # None unless a recorder keeps positions (engine/_padding)
    call = None
    if padding is not None and padding.aware:  # `last` / `first` read the published call
        call = padding.enter(self, args, kwargs, warning_state(self))
    elif padding is not None:
        padding.check(self, args, kwargs, warning_state(self))
    try:
        hooks = token = None
        try:
            hooks = hold_hooks(self, tasks, flags, session)  # kept until a forward without capture
            token = session.enter()
            outputs = forward(self, *args, **kwargs)
        finally:
            if token is not None:
                session.exit(token)
            if hooks is not None:
                hooks.finish(session)

        collector = session.collector
        for key, values in collector.lists.items():
            if key == "hidden_states" and tie_last_enabled(config, _spec_options(self), tie_last_hidden_states):
                tie_last_hidden_state(values, outputs, collector.last_transform.get(key))
            outputs[key] = tuple(values)
    finally:
        if call is not None:
            PaddingWatch.exit(call)
    return outputs
