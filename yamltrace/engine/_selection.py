"""Which positions of each captured key to keep: `output_hidden_states` indices and recorder `layers`."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ._recorder import OutputRecorder

__all__ = ["position_counter", "requested_positions", "resolve_positions", "resolve_selections"]


def requested_positions(flag: Any) -> list[int] | None:
    """The positions an `output_hidden_states` value selects, or `None` when it is a plain flag."""
    if isinstance(flag, bool) or flag is None:
        return None
    if isinstance(flag, int):
        return [flag]
    return list(flag)


def resolve_selections(
    tasks: Iterable[tuple[str, OutputRecorder]],
    keys: Iterable[str],
    hidden_states_flag: Any,
    count_positions: Callable[[str, OutputRecorder], int | None],
) -> dict[str, frozenset[int]]:
    """Resolve the kept positions of each requested key.

    `hidden_states` follows an index/list `output_hidden_states` flag when one is given; otherwise a key
    whose recorders all declare `layers` keeps the union of them. `count_positions(key, recorder)` says
    how many positions the key will have, for negative indices (`None` when unknown).
    """
    tasks = tuple(tasks)
    if hidden_states_flag is None or hidden_states_flag is True or hidden_states_flag is False:
        for _, recorder in tasks:  # (a loop, not a generator: this runs on every capturing forward)
            if recorder.layers is not None:
                break
        else:
            return {}  # every position of every key is kept
    by_key: dict[str, list[OutputRecorder]] = {}
    for key, recorder in tasks:
        by_key.setdefault(key, []).append(recorder)
    selections: dict[str, frozenset[int]] = {}
    for key in keys:
        recorders = by_key.get(key)
        if not recorders:
            continue
        selected = requested_positions(hidden_states_flag) if key == "hidden_states" else None
        if selected is None and all(r.layers is not None for r in recorders):
            selected = sorted({i for r in recorders for i in r.layers or ()})
        if selected is not None:
            selections[key] = resolve_positions(selected, count_positions(key, recorders[0]), key)
    return selections


def resolve_positions(selected: Iterable[int], total: int | None, what: str) -> frozenset[int]:
    """Resolve possibly negative positions against `total`; out-of-range positions select nothing."""
    selected = list(selected)
    if total is None:
        if any(i < 0 for i in selected):
            raise ValueError(
                f"Cannot select {what} with negative indices {selected}: the number of layers is unknown. "
                "Set it in the model's config (see the recorder's num_hidden_layers_key) or use indices >= 0."
            )
        return frozenset(selected)
    return frozenset(i % total for i in selected if -total <= i < total)


def position_counter(config: Any, hooked: Mapping[str, int] | None = None) -> Callable[[str, OutputRecorder], int | None]:
    """How many positions a key has, for its negative indices: the config's layer count (the recorder's
    `num_hidden_layers_key`), else the number of modules hooked for the key when `hooked` says it,
    else None (unknown); one more for `hidden_states` with its initial state."""

    def count(key: str, recorder: OutputRecorder) -> int | None:
        layers: int | None = getattr(config, recorder.num_hidden_layers_key, None)
        if layers is None:
            if hooked is None:
                return None
            layers = hooked.get(key, 0)
        return layers + int(key == "hidden_states" and recorder.capture_initial_hidden_state)

    return count
