"""`Captures`: what a `trace` block captured, as a read-only mapping, with steps and module paths."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

import torch
from torch import nn

from .engine import head_count
from .errors import did_you_mean

__all__ = ["Captures"]


class Captures(Mapping[str, tuple[Any, ...]]):
    """Read-only mapping `key -> tuple` of what a `trace` block captured, all steps concatenated.

    `steps` holds one read-only mapping per finished call of the traced module, in call order. Each
    value knows the module it came from: `paths(key)` lists their dotted paths beside `self[key]`,
    `by_path(key)` maps path -> value, `stack(key)` stacks a key's tensors into one, and
    `cat_steps(key)` joins every step's value of each module along the sequence (a `generate` call),
    and `split_heads(key)` gives heads their own dimension (`attention_heads`).
    """

    def __init__(
        self,
        lists: dict[str, list[Any]],
        ends: list[tuple[int, ...]],
        paths: dict[str, list[str]],
        model: nn.Module | None = None,
    ) -> None:
        # The trace's flat lists (values, and the path of each), and where each finished step ends in
        # them (a step in progress or one that failed is not visible). All are only ever changed in
        # place by the trace's hooks.
        self._keys = tuple(lists)
        self._lists = lists
        self._paths = paths
        self._ends = ends
        self._model = model  # the traced module, whose submodules `split_heads` asks for head counts

    @property
    def steps(self) -> tuple[Mapping[str, tuple[Any, ...]], ...]:
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

    def __getitem__(self, key: str) -> tuple[Any, ...]:
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
        return self._by_path(key, step, "by_path")

    def _by_path(self, key: str, step: int | None, method: str) -> dict[str, Any]:
        """`by_path`, its errors naming `method` (the public call that was made)."""
        step = self._only_step(key, step, method)
        start, end = self._span(key, step)
        found: dict[str, Any] = {}
        for path, value in zip(self.paths(key, step=step), self._lists[key][start:end]):
            if value is None:
                continue
            if path in found:
                raise ValueError(
                    f"{method}({key!r}): module {path or '<root>'} produced more than one value in this step "
                    f"(a module called more than once); use captures[{key!r}] with captures.paths({key!r})."
                )
            found[path] = value
        return found

    def stack(self, key: str, *, step: int | None = None) -> Any:
        """The key's tensors (of one step: pass `step` when there are several) stacked into one tensor
        `[n_values, ...]`, values left out (`None`) skipped; ValueError naming each shape if they differ."""
        found = self._by_path(key, step, "stack")
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
                f"{method}({key!r}): the trace has {len(self._ends)} steps; pass step=i (an index into captures.steps), "
                f"or join the steps along the sequence with cat_steps({key!r})."
            )
        return step

    def cat_steps(self, key: str, *, dim: int = 1) -> tuple[Any, ...]:
        """One value per module of a step, each module's values of every step concatenated along `dim`.

        For `generate`, each forward is a step: the prefill sees the prompt (`seq` = n), each decode
        step one new token (`seq` = 1), so with the default `dim=1` (`[batch, seq, ...]`) each layer's
        hidden states come back as one `[batch, n + steps - 1, ...]` tensor, in the order of
        `steps[0][key]`. Every step must hold the same modules in the same order; a value left out
        (`None`, by `layers`) stays `None`. ValueError naming the step, module and shapes when they do
        not join: tensors whose other dimensions grow too (attention weights `[batch, heads, query,
        key]`: the key length grows by one per step) cannot be concatenated.
        """
        if not self._ends:
            raise ValueError(f"cat_steps({key!r}): the trace has no finished step.")
        steps = [(self.paths(key, step=i), self._values(key, i)) for i in range(len(self._ends))]
        first_paths, first_values = steps[0]
        joined: list[Any] = []
        for position, path in enumerate(first_paths):
            where = f"cat_steps({key!r}): module {path or '<root>'} (value {position})"
            values = []
            for number, (paths, step_values) in enumerate(steps):
                if paths != first_paths:
                    raise ValueError(
                        f"cat_steps({key!r}): step {number} captured modules {list(paths)[:8]}, step 0 {list(first_paths)[:8]}; "
                        "every step must record the same modules (read captures.steps one by one instead)."
                    )
                values.append(step_values[position])
            joined.append(_joined(where, values, dim))
        return tuple(joined)

    def split_heads(self, key: str, *, step: int | None = None, heads: int | None = None) -> tuple[Any, ...]:
        """`self[key]` (one step's values with `step`) with the last dimension split into heads:
        `[batch, seq, heads * head_dim]` -> `[batch, seq, heads, head_dim]`, a view (a copy only where the
        last dimension is not contiguous in memory).

        For `attention_heads` (the input of the attention output projection, every head's result side
        by side). The head count is the captured module's own: the nearest module on its path that
        says (an attention module's `num_heads` or `head_dim`, else a model's
        `config.num_attention_heads`), so each tower of a composite splits by its own; `heads=N`
        overrides it. Values left out (`None`) stay `None`; ValueError naming the module when its
        count is unknown or does not divide the last dimension.
        """
        start, end = self._span(key, step)
        split: list[Any] = []
        for path, value in zip(self.paths(key, step=step), self._lists[key][start:end]):
            if value is None:
                split.append(None)
                continue
            where = f"split_heads({key!r}): module {path or '<root>'}"
            if not isinstance(value, torch.Tensor) or value.dim() == 0:
                raise ValueError(f"{where} captured {type(value).__name__}, not a tensor with a last dimension to split.")
            width = value.shape[-1]
            count = heads
            if count is None and self._model is not None:
                count = head_count(self._model, path, width)
            if count is None:
                raise ValueError(f"{where}: no module on its path says how many heads it has; pass heads=N.")
            if count <= 0 or width % count:
                raise ValueError(f"{where}: a last dimension of {width} does not split into {count} heads; pass heads=N.")
            split.append(value.reshape(*value.shape[:-1], count, width // count))
        return tuple(split)

    def _values(self, key: str, step: int) -> list[Any]:
        start, end = self._span(key, step)
        return self._lists[key][start:end]

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __repr__(self) -> str:
        counts = ", ".join(f"{k}: {len(self[k])}" for k in self._keys)
        return f"Captures({len(self._ends)} step(s); {counts})"


def _joined(where: str, values: list[Any], dim: int) -> Any:
    """`values` (one module's value of each step) concatenated along `dim`; None when all are None."""
    if all(value is None for value in values):
        return None
    for number, value in enumerate(values):
        if not isinstance(value, torch.Tensor):
            kind = "nothing (None)" if value is None else f"a {type(value).__name__}"
            raise ValueError(f"{where}: step {number} captured {kind}, not a tensor; only tensors can be joined.")
    shapes = [tuple(value.shape) for value in values]
    ndim = len(shapes[0])
    if not -ndim <= dim < ndim or any(len(shape) != ndim for shape in shapes):
        raise ValueError(f"{where}: cannot join shapes {shapes[:4]} along dim {dim}; pass the sequence dimension as dim=.")
    axis = dim % ndim
    for number, shape in enumerate(shapes):
        if shape[:axis] + shape[axis + 1 :] != shapes[0][:axis] + shapes[0][axis + 1 :]:
            raise ValueError(
                f"{where}: step {number} has shape {shape}, step 0 {shapes[0]}: they differ outside dim {dim}, so they do "
                "not join along it (attention weights grow along the key too); read captures.steps one by one."
            )
    return torch.cat(values, dim=axis)
