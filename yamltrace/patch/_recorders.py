"""Recorder retargeting: a model's capture maps follow its patched classes, per instance.

transformers retargets by mutating the class attribute, so a patch outlives its mapping; here each
module that declares a map gets a retargeted copy on the *instance*, undone by the returned handle.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, cast

import torch
from torch import nn

from ..engine import CAPTURE_MAP_ATTRIBUTE, invalidate, normalize_output_map, own_output_map
from ..spec._patch_rule import PatchRule, device_type, model_device
from ._handle import PatchHandle, Replacement
from ._registry import MappingLike, resolve_rule

__all__ = ["patch_output_recorders", "retarget_output_map"]


def _retarget(key: str, recorder: Any, rule: PatchRule) -> tuple[Any, Replacement | None]:
    """The recorder with its target swapped for the rule's replacement, and the change (None if none)."""
    if isinstance(recorder, (str, type)):
        replacement = rule.replace_class(recorder) if isinstance(recorder, type) else rule.replacement_for(recorder)
        if replacement is None or replacement is recorder:
            return recorder, None
        return replacement, Replacement(key, recorder, replacement, "recorder")
    normalized = normalize_output_map({key: recorder})[0][1]
    retargeted = rule.retarget(normalized)
    if retargeted is normalized:
        return recorder, None
    # An OutputRecorder has a target_class or else a class_name (its constructor checks).
    original = cast("type | str", normalized.target_class or normalized.class_name)
    return retargeted, Replacement(key, original, cast(type, retargeted.target_class), "recorder")


def retarget_output_map(output_map: Mapping[str, Any], rule: PatchRule) -> tuple[dict[str, Any], list[Replacement]]:
    """A copy of a `_can_record_outputs` map with every recorder retargeted, and what changed."""
    result: dict[str, Any] = {}
    changes: list[Replacement] = []
    for key, recorders in output_map.items():
        single = not isinstance(recorders, (list, tuple))
        retargeted = []
        for recorder in [recorders] if single else recorders:
            new, change = _retarget(key, recorder, rule)
            retargeted.append(new)
            if change is not None:
                changes.append(change)
        result[key] = retargeted[0] if single else retargeted
    return result, changes


def _set_instance_map(module: nn.Module, output_map: dict[str, Any]) -> Callable[[], None]:
    """Give `module` its own capture map (an instance attribute); returns the undo."""
    had_own = CAPTURE_MAP_ATTRIBUTE in vars(module)
    previous = vars(module).get(CAPTURE_MAP_ATTRIBUTE)
    setattr(module, CAPTURE_MAP_ATTRIBUTE, output_map)
    invalidate()

    def undo() -> None:
        if had_own:
            setattr(module, CAPTURE_MAP_ATTRIBUTE, previous)
        else:
            vars(module).pop(CAPTURE_MAP_ATTRIBUTE, None)
        invalidate()

    return undo


def patch_output_recorders(
    model: nn.Module,
    mapping: MappingLike = None,
    *,
    device: str | torch.device | None = None,
) -> PatchHandle:
    """Retarget the recorders of every submodule's capture map to their replacements, for this model only.

    Each recorder (OutputRecorder, class or class-name string; single or in a list) whose class name
    the mapping selects now targets the replacement, so capture hooks fire on replacement instances.
    The retargeted map is set on each *instance*: the class, and models built later, are untouched.
    `device` selects a Spec's entries (default: the model's device). Returns a handle that restores.

    Args:
        model: the model whose modules' capture maps to retarget.
        mapping: a `pattern -> class` mapping, a `Spec` or a `PatchRule`; None uses the process-wide registry.
        device: which device-conditioned entries of a Spec apply.

    Returns:
        A `PatchHandle`; `remove()` deletes the instance maps again (idempotent).
    """
    rule = resolve_rule(mapping, device_type(device, model_device(model)))
    updates = []
    for path, module in model.named_modules():
        output_map = own_output_map(module)
        if isinstance(output_map, Mapping) and output_map:
            retargeted, changes = retarget_output_map(output_map, rule)
            if changes:
                prefix = f"{path}.{CAPTURE_MAP_ATTRIBUTE}" if path else CAPTURE_MAP_ATTRIBUTE
                changes = [dataclasses.replace(c, path=f"{prefix}[{c.path!r}]") for c in changes]
                updates.append((module, retargeted, changes))
    undo = [_set_instance_map(module, retargeted) for module, retargeted, _ in updates]
    return PatchHandle([c for _, _, changes in updates for c in changes], undo)
