"""The patch rule: which replacement a patch mapping gives a class on a device, and recorders retargeted by it.

One home for transformers' selection rule (`transformers.monkey_patching`): an exact class name wins;
otherwise the keys are tried as patterns with `search`, in registration (or declaration) order; a key
that is no valid pattern selects only its exact name. Patterns run on RE2 (`_patterns.key_matcher`),
so no key can hang a lookup. A spec entry with a `device` condition takes part only on that device.
`patch_model`, `apply_patches`, `patch_output_recorders`, `from_pretrained`, `trace` and
`yamltrace check` all select through a `PatchRule`; recorders follow it through `PatchRule.retarget`.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Protocol

import torch
from torch import nn

from .._recorder import OutputRecorder
from ._patterns import key_matcher

if TYPE_CHECKING:
    from ._spec import Spec

__all__ = [
    "PatchRule",
    "device_matches",
    "device_type",
    "model_device",
    "model_swaps",
    "record_swaps",
    "swap_pairs",
    "retarget_spec",
]

# Where a model keeps the classes its patches replaced (original -> replacement), on the root instance.
SWAPS_ATTRIBUTE = "_yamltrace_swaps"


class _Entry(Protocol):
    """A spec's patch entry (`PatchEntry`), as far as selection reads it."""

    @property
    def pattern(self) -> str: ...
    @property
    def replacement(self) -> type: ...
    @property
    def device(self) -> str | None: ...


class PatchRule:
    """An ordered `key -> replacement class` mapping with its selection rule (see the module docstring).

    `swaps` maps classes a model already had replaced (original -> replacement, by identity) and is
    consulted before the keys, so a recorder of the original class follows the model's own swap.
    """

    def __init__(self, mapping: Mapping[str, type] | None = None, swaps: Mapping[type, type] | None = None) -> None:
        self.mapping: dict[str, type] = dict(mapping or {})
        self.swaps: dict[type, type] = dict(swaps or {})

    @classmethod
    def for_entries(cls, entries: Iterable[_Entry], device: str | None) -> PatchRule:
        """The rule of a spec's patch entries on `device`; None takes every entry whatever its condition."""
        mapping: dict[str, type] = {}
        for entry in entries:
            if entry.device is None or device is None or device_matches(entry.device, device):
                mapping.setdefault(entry.pattern, entry.replacement)
        return cls(mapping)

    def __bool__(self) -> bool:
        return bool(self.mapping or self.swaps)

    def __repr__(self) -> str:
        return f"PatchRule({ {k: v.__qualname__ for k, v in self.mapping.items()} })"

    def key_for(self, class_name: str) -> str | None:
        """The key that selects `class_name`: the exact name, else the first pattern that `search`es it."""
        if class_name in self.mapping:
            return class_name
        for key in self.mapping:
            matcher = key_matcher(key)
            if matcher is not None and matcher.search(class_name):
                return key
        return None

    def replacement_for(self, class_name: str) -> type | None:
        """The replacement the rule gives a class of this name, or None."""
        key = self.key_for(class_name)
        return None if key is None else self.mapping[key]

    def replace_class(self, cls: type) -> type:
        """What a module of class `cls` is after the patch: its swap, else its replacement, else itself."""
        return self.swaps.get(cls) or self.replacement_for(cls.__name__) or cls

    def retarget(self, recorder: OutputRecorder) -> OutputRecorder:
        """The recorder hooking the replacements: each target class (one or a tuple) replaced; a recorder
        with only a `class_name` gains the replacement that name selects as its target (transformers' rule)."""
        targets = recorder.target_classes
        if not targets:
            found = None if recorder.class_name is None else self.replacement_for(recorder.class_name)
            return recorder if found is None else dataclasses.replace(recorder, target_class=found)
        replaced = tuple(self.replace_class(c) for c in targets)
        if replaced == targets:
            return recorder
        return dataclasses.replace(recorder, target_class=replaced if isinstance(recorder.target_class, tuple) else replaced[0])


def retarget_spec(spec: Spec, rule: PatchRule) -> Spec:
    """The spec whose recorders, at the root and in every scope, and interventions hook the rule's replacements."""
    if not rule:
        return spec

    def section(outputs: Mapping[str, tuple[OutputRecorder, ...]]) -> dict[str, tuple[OutputRecorder, ...]]:
        return {key: tuple(rule.retarget(r) for r in recorders) for key, recorders in outputs.items()}

    scopes = {path: dataclasses.replace(scope, outputs=section(scope.outputs)) for path, scope in spec.scopes.items()}
    edits = tuple(dataclasses.replace(iv, select=rule.retarget(iv.select)) for iv in spec.interventions)
    return dataclasses.replace(spec, outputs=section(spec.outputs), scopes=scopes, interventions=edits)


def model_swaps(model: nn.Module) -> dict[type, type]:
    """The classes whose modules the model had replaced (original -> replacement), as patches recorded them.

    `trace` retargets any spec by them, so a spec written for the original classes follows the
    model's swaps wherever the swaps came from (`from_pretrained`, `patch_model`)."""
    return dict(swap_pairs(model))


def swap_pairs(model: nn.Module) -> tuple[tuple[type, type], ...]:
    """`model_swaps(model)` as `(original, replacement)` pairs (what a cache key names; no dict copied)."""
    return tuple(model.__dict__.get(SWAPS_ATTRIBUTE, _NO_SWAPS).items())


_NO_SWAPS: dict[type, type] = {}


def record_swaps(model: nn.Module, swaps: Iterable[tuple[type, type]]) -> Callable[[], None]:
    """Add `(original, replacement)` pairs to what the model knows of its swaps; returns the undo."""
    added = {original: replacement for original, replacement in swaps if original is not replacement}
    before = vars(model).get(SWAPS_ATTRIBUTE)
    if not added:
        return lambda: None
    vars(model)[SWAPS_ATTRIBUTE] = {**(before or {}), **added}

    def undo() -> None:
        if before is None:
            vars(model).pop(SWAPS_ATTRIBUTE, None)
        else:
            vars(model)[SWAPS_ATTRIBUTE] = before

    return undo


def model_device(model: nn.Module) -> str:
    """The device ("cpu", "cuda:0", "mps:0", ...) of the model's first parameter or buffer; "cpu" if none."""
    for tensor in itertools.chain(model.parameters(), model.buffers()):
        return str(tensor.device)
    return "cpu"


def device_type(device: str | torch.device | None, default: str) -> str:
    """`device` as torch writes it ("cpu", "cuda", "cuda:1", ...), or `default` when it is None."""
    return default if device is None else str(torch.device(device))


def device_matches(wanted: str, device: str) -> bool:
    """Whether a patch entry's `device` condition holds on `device`: a type (`cuda`) matches every device
    of that type; a device with an index (`cuda:1`) matches that device only (`cuda` alone is the current one)."""
    w, d = torch.device(wanted), torch.device(device)
    if w.type != d.type:
        return False
    if w.index is None:
        return True
    index = d.index
    if index is None:
        index = torch.cuda.current_device() if d.type == "cuda" and torch.cuda.is_available() else 0
    return w.index == index
