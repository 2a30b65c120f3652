"""Class swaps: a patch mapping (class name or pattern -> replacement `nn.Module` class) applied three ways.

`apply_patches` swaps classes while a model is built; `patch_model` swaps the submodules of a built
model; `patch_output_recorders` retargets capture maps to the replacements, per instance. Each takes
an explicit mapping or a `Spec` (or, as transformers' API does, the process-wide registry:
`register_patch_mapping` and its siblings) and returns or yields what undoes it. Which key selects a
class is `yamltrace.spec._patch_rule.PatchRule`'s rule, the one every caller shares.
"""

from ._construct import apply_patches
from ._handle import PatchHandle, Replacement
from ._model import patch_model
from ._recorders import patch_output_recorders
from ._registry import clear_patch_mapping, get_patch_mapping, register_patch_mapping, unregister_patch_mapping
from ._state import RenamedState

__all__ = [
    "PatchHandle",
    "RenamedState",
    "Replacement",
    "apply_patches",
    "clear_patch_mapping",
    "get_patch_mapping",
    "patch_model",
    "patch_output_recorders",
    "register_patch_mapping",
    "unregister_patch_mapping",
]
