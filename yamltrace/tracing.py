"""`trace`: capture submodule outputs of any `nn.Module` for the duration of a `with` block.

The model needs no cooperation: hooks go on when the block starts and come off when it ends. Each call
of the root module is one step; the yielded mapping holds every step's captures in call order (a
single forward gives exactly the model's own `output_hidden_states` / `output_attentions` tuples).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

from torch import nn

from .engine import (
    Collector,
    OutputRecorder,
    Session,
    decorator_tie_last,
    install_hooks,
    normalize_output_map,
    normalized_tasks,
    own_output_map,
    plan_hooks,
    resolve_selections,
    tie_last_enabled,
    tie_last_hidden_state,
    uncompiled,
)
from .errors import did_you_mean
from .spec import Spec, load_spec

__all__ = ["trace", "Captures"]

class Captures(Mapping[str, tuple]):
    """Read-only mapping `key -> tuple` of what a `trace` block captured, all steps concatenated.

    `steps` holds one read-only mapping per finished call of the traced module, in call order. Each
    value knows the module it came from: `paths(key)` lists their dotted paths beside `self[key]`,
    `by_path(key)` maps path -> value, and `stack(key)` stacks a key's tensors into one.
    """

    def __init__(self, lists: dict[str, list[Any]], ends: list[tuple[int, ...]], paths: dict[str, list[str]]) -> None:
        # The trace's flat lists (values, and the path of each), and where each finished step ends in
        # them (a step in progress or one that failed is not visible). All are only ever changed in
        # place by the trace's hooks.
        self._keys = tuple(lists)
        self._lists = lists
        self._paths = paths
        self._ends = ends

    @property
    def steps(self) -> tuple[Mapping[str, tuple], ...]:
        views, start = [], (0,) * len(self._keys)
        for end in self._ends:
            views.append(MappingProxyType({k: tuple(self._lists[k][a:b]) for k, a, b in zip(self._keys, start, end)}))
            start = end
        return tuple(views)

    def _span(self, key: str, step: int | None) -> tuple[int, int]:
        """Where `key`'s values of `step` (all steps when None) lie in the flat lists."""
        if key not in self._keys:
            raise KeyError(f"{key!r} was not traced; traced keys: {list(self._keys)}{did_you_mean(key, self._keys)}")
        column = self._keys.index(key)
        if step is None:
            return 0, self._ends[-1][column] if self._ends else 0
        count = len(self._ends)
        if not -count <= step < count:
            raise IndexError(f"step {step} out of range: the trace has {count} finished step(s).")
        step %= count
        return (self._ends[step - 1][column] if step else 0), self._ends[step][column]

    def __getitem__(self, key: str) -> tuple:
        start, end = self._span(key, None)
        return tuple(self._lists[key][start:end])

    def paths(self, key: str, *, step: int | None = None) -> tuple[str, ...]:
        """The module path of each value of `self[key]` (of one step's values with `step`), in order.

        A path is the module's name in `model.named_modules()` (`""` for the traced module itself);
        the initial hidden state, which is the input of the first hooked module, reads `<path>:input`.
        """
        start, end = self._span(key, step)
        return tuple(path[1:] if path.startswith(".") else path for path in self._paths[key][start:end])

    def by_path(self, key: str, *, step: int | None = None) -> dict[str, Any]:
        """`{module path: value}` for one key, in capture order; values left out (`None`) are omitted.

        With several steps, pass `step` (an index into `steps`). A module that ran more than once in
        the step (a shared layer) has no single value: that raises ValueError; use `self[key]` and
        `paths(key)` then.
        """
        step = self._only_step(key, step, "by_path")
        start, end = self._span(key, step)
        found: dict[str, Any] = {}
        for path, value in zip(self.paths(key, step=step), self._lists[key][start:end]):
            if value is None:
                continue
            if path in found:
                raise ValueError(
                    f"by_path({key!r}): module {path or '<root>'} produced more than one value in this step "
                    f"(a module called more than once); use captures[{key!r}] with captures.paths({key!r})."
                )
            found[path] = value
        return found

    def stack(self, key: str, *, step: int | None = None) -> Any:
        """The key's tensors (of one step: pass `step` when there are several) stacked into one tensor
        `[n_values, ...]`, values left out (`None`) skipped; ValueError naming each shape if they differ."""
        import torch

        found = self.by_path(key, step=step)
        tensors = list(found.values())
        if not tensors:
            raise ValueError(f"stack({key!r}): nothing was captured for {key!r}.")
        if not all(isinstance(t, torch.Tensor) for t in tensors):
            kinds = sorted({type(t).__name__ for t in tensors if not isinstance(t, torch.Tensor)})
            raise ValueError(f"stack({key!r}): the captured values are not all tensors (found {', '.join(kinds)}).")
        shapes = {tuple(t.shape) for t in tensors}
        if len(shapes) > 1:
            listed = "; ".join(f"{path or '<root>'}: {tuple(t.shape)}" for path, t in found.items())
            raise ValueError(f"stack({key!r}): the captured tensors differ in shape ({listed}).")
        return torch.stack(tensors)

    def _only_step(self, key: str, step: int | None, method: str) -> int | None:
        if step is None and len(self._ends) > 1:
            raise ValueError(
                f"{method}({key!r}): the trace has {len(self._ends)} steps; pass step=i (an index into captures.steps)."
            )
        return step

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __repr__(self) -> str:
        counts = ", ".join(f"{k}: {len(self[k])}" for k in self._keys)
        return f"Captures({len(self._ends)} step(s); {counts})"


def _resolve_spec(model: nn.Module, spec: Any) -> tuple[tuple[tuple[str, OutputRecorder], ...], dict[str, Any], bool]:
    """(tasks, options, nested_maps) for `trace`'s `spec` argument."""
    if spec is None:
        own = own_output_map(model)
        if not isinstance(own, Mapping) or not own:
            raise ValueError(
                f"{type(model).__name__} declares no _can_record_outputs; pass trace(model, spec) with a Spec, "
                "a spec file or a {key: recorder} dict."
            )
        attached = getattr(model, "yamltrace_spec", None)
        if attached is None:
            return normalized_tasks(own), {}, True
        # from_pretrained set the attached spec's map on the instance, retargeted to patched classes.
        return normalized_tasks(own), dict(attached.options), False
    if isinstance(spec, (str, os.PathLike)):
        spec = load_spec(spec, for_model=model)
    if isinstance(spec, Spec):
        return normalize_output_map(spec.outputs), dict(spec.options), False
    if isinstance(spec, Mapping):
        return normalize_output_map(spec), {}, False
    raise TypeError(f"trace() takes a Spec, a spec path or a capture dict, got {type(spec).__name__}.")


@contextlib.contextmanager
def trace(model: nn.Module, spec: Any = None, *, outputs: Any = None) -> Iterator[Captures]:
    """Capture the outputs a spec declares while the block runs; yields a read-only `key -> tuple` map.

    Args:
        model: any `nn.Module`; it does not need to declare anything.
        spec: a `Spec`, a spec file path, or a `_can_record_outputs`-style dict. `None` uses the spec
            attached by `from_pretrained`, else the model's own `_can_record_outputs` (nested models
            then follow their own maps).
        outputs: the keys to capture (default: every key of the spec).

    Hooks exist only inside the block, record only calls made in the context (thread) that entered it,
    and are removed even if the block raises. `model` may be the module `torch.compile` returned, or
    the original of a compiled module, before or after its first compiled call (see docs/capture.md).
    """
    tasks, options, nested_maps = _resolve_spec(model, spec)
    known = tuple(dict.fromkeys(k for k, _ in tasks))
    keys = known if outputs is None else tuple(dict.fromkeys([outputs] if isinstance(outputs, str) else outputs))
    for key in keys:
        if key not in known:
            raise KeyError(f"trace: output {key!r} is not in the spec (keys: {list(known)}){did_you_mean(key, known)}")

    plan = plan_hooks(model, tasks, nested_maps=nested_maps, keys=keys)
    hooked = {k: sum(1 for _, _, entries in plan if any(e[0] == k for e in entries)) for k in keys}
    config = getattr(model, "config", None)

    def count_positions(key: str, recorder: OutputRecorder) -> int:
        layers = getattr(config, recorder.num_hidden_layers_key, None)
        if layers is None:
            layers = hooked[key]
        return layers + int(key == "hidden_states" and recorder.capture_initial_hidden_state)

    selections = resolve_selections(tasks, keys, None, count_positions)
    session = Session(Collector(keys, selections), block=True)
    collector = session.collector
    lists, starts = collector.lists, collector.starts
    ends: list[tuple[int, ...]] = []
    paths = collector.paths
    captures = Captures(lists, ends, paths)
    is_active = session.recording
    tie_last = "hidden_states" in lists and tie_last_enabled(config, options, decorator_tie_last(uncompiled(model)))
    depth = 0

    # Steps are kept in place (no new containers inside the hooks, which torch.compile may trace):
    # a finished step moves `starts` to the lists' ends; an unfinished one is cut off.
    def discard_unfinished() -> None:
        for key in keys:
            del lists[key][starts[key] :]
            del paths[key][starts[key] :]

    def step_started(module: nn.Module, args: tuple) -> None:
        nonlocal depth
        if is_active():
            if depth == 0:
                discard_unfinished()
            depth += 1

    def step_finished(module: nn.Module, args: tuple, output: Any) -> None:
        if is_active() and depth == 1:
            if tie_last and len(lists["hidden_states"]) > starts["hidden_states"]:
                tie_last_hidden_state(lists["hidden_states"], output, collector.last_transform.get("hidden_states"))
            ends.append(tuple([len(lists[key]) for key in keys]))
            for key in keys:
                starts[key] = len(lists[key])

    def step_ended(module: nn.Module, args: tuple, output: Any) -> None:
        # Runs after step_finished, and also when the forward raised: a failed step is discarded.
        nonlocal depth
        if is_active() and depth > 0:
            depth -= 1
            if depth == 0:
                discard_unfinished()

    handles = []
    token = None
    try:
        handles.append(model.register_forward_pre_hook(step_started))
        handles.append(install_hooks(plan, session))
        handles.append(model.register_forward_hook(step_finished))
        handles.append(model.register_forward_hook(step_ended, always_call=True))
        token = session.enter()
        yield captures
    finally:
        if token is not None:
            session.exit(token)
        session.open = False
        for handle in handles:
            handle.remove()
