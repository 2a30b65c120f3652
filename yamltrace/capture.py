"""`capture_outputs`: the forward decorator that records submodule outputs into a model's output.

Same contract as transformers 5.x: flags `output_<key>` come from the forward's kwargs, else from the
config; captured lists become tuples on the returned `ModelOutput`. Hooks exist only while a forward
that requested capture runs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import Any, TypeVar

import torch
from torch import nn
from torch.compiler import is_compiling

from .hooks import Collector, Transform, install_hooks, own_output_map, plan_hooks, remove_hooks
from .recorder import OutputRecorder, normalized_tasks
from .selection import resolve_selections

__all__ = ["capture_outputs", "requested_flags", "tie_last_hidden_state"]

F = TypeVar("F", bound=Callable[..., Any])

# The collector of the innermost decorated forward running in this context. A nested decorated
# forward shadows its parent's, exactly as transformers does.
_active_collector: ContextVar[Collector | None] = ContextVar("yamltrace_active_collector", default=None)
_NO_CAPTURE = Collector(())

# Keys switched on by another key's flag (transformers' backward-compatible aliases).
FLAG_ALIASES = {"cross_attentions": "attentions", "mask_decoder_attentions": "attentions"}


def _is_active(collector: Collector) -> bool:
    return _active_collector.get() is collector


def requested_flags(keys: Any, kwargs: dict[str, Any], config: Any) -> dict[str, Any]:
    """The truthy `output_<key>` flag of each key: kwargs first, then config; aliases follow their source."""
    flags = {}
    for key in keys:
        name = f"output_{FLAG_ALIASES.get(key, key)}"
        value = kwargs.get(name, _UNSET)
        if value is _UNSET:
            value = getattr(config, name, False)
        if value:
            flags[key] = value
    return flags


_UNSET = object()


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


def _layer_count(config: Any) -> Callable[[str, OutputRecorder], int | None]:
    def count(key: str, recorder: OutputRecorder) -> int | None:
        layers = getattr(config, recorder.num_hidden_layers_key, None)
        if layers is None:
            return None
        return layers + int(key == "hidden_states" and recorder.capture_initial_hidden_state)

    return count


def capture_outputs(func: F | None = None, *, tie_last_hidden_states: bool = True) -> Any:
    """Decorate a base model's `forward` so it records the outputs its `_can_record_outputs` declares.

    Use bare (`@capture_outputs`) or with arguments (`@capture_outputs(tie_last_hidden_states=False)`
    for models whose last hidden state must stay the pre-norm one). `config.tie_last_hidden_states`,
    when set, overrides the argument.
    """

    def decorate(forward: F) -> F:
        @functools.wraps(forward)
        def wrapper(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
            config = getattr(self, "config", None)
            return_dict = kwargs.pop("return_dict", getattr(config, "return_dict", True))
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
                token = _active_collector.set(_NO_CAPTURE)
                try:
                    outputs = forward(self, *args, **kwargs)
                finally:
                    _active_collector.reset(token)
                return outputs.to_tuple() if return_dict is False else outputs

            tasks = normalized_tasks(output_map)
            selections = resolve_selections(tasks, flags, flags.get("hidden_states"), _layer_count(config))
            collector = Collector(flags, selections)
            handles = install_hooks(plan_hooks(self, tasks, nested_maps=True, keys=flags), collector, _is_active)
            token = _active_collector.set(collector)
            try:
                outputs = forward(self, *args, **kwargs)
            finally:
                _active_collector.reset(token)
                remove_hooks(handles)

            for key, values in collector.lists.items():
                if key == "hidden_states":
                    tie_last = getattr(config, "tie_last_hidden_states", None)
                    if (tie_last_hidden_states if tie_last is None else tie_last):
                        tie_last_hidden_state(values, outputs, collector.last_transform.get(key))
                outputs[key] = tuple(values)
            return outputs.to_tuple() if return_dict is False else outputs

        wrapper.__yamltrace_tie_last_hidden_states__ = tie_last_hidden_states  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    if func is not None:
        return decorate(func)
    return decorate
