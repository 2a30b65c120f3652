"""Patch mappings: class name or regex -> replacement `nn.Module` class, and the three ways to apply one.

`_registry` holds transformers' lookup rules and the process-wide registry (`register_patch_mapping`,
kept for parity); `_construct` swaps classes while a model is built (`apply_patches`); `_model` swaps
the submodules of a built model (`patch_model`); `_recorders` retargets capture maps to the
replacements, per instance (`patch_output_recorders`). Each takes an explicit mapping or a `Spec`
and returns or yields what undoes it.
"""

from ._construct import apply_patches
from ._handle import PatchHandle, Replacement, model_device
from ._model import patch_model
from ._recorders import patch_output_recorders, retarget_output_map
from ._registry import (
    MappingLike,
    PatchRegistry,
    clear_patch_mapping,
    default_patch_registry,
    find_key,
    find_replacement,
    get_patch_mapping,
    register_patch_mapping,
    resolve_mapping,
    unregister_patch_mapping,
)

__all__ = [
    "MappingLike",
    "PatchHandle",
    "PatchRegistry",
    "Replacement",
    "apply_patches",
    "clear_patch_mapping",
    "default_patch_registry",
    "find_key",
    "find_replacement",
    "get_patch_mapping",
    "model_device",
    "patch_model",
    "patch_output_recorders",
    "register_patch_mapping",
    "resolve_mapping",
    "retarget_output_map",
    "unregister_patch_mapping",
]
