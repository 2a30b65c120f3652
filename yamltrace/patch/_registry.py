"""The process-wide patch mapping (transformers' `monkey_patching` API) and how a mapping argument is read.

The selection rule (an exact class name beats a pattern; patterns in registration order, on RE2) lives
in `yamltrace.spec._patch_rule.PatchRule`. The process-wide registry exists because transformers' API
demands it; it is guarded by a lock, and every function that reads it also takes an explicit mapping
or a `Spec` instead. Error messages begin with transformers' own phrases, so code that checks them
keeps working, and go on with what yamltrace adds (where, and how to fix it).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any, Union

from torch import nn

from ..spec._patch_rule import PatchRule

__all__ = [
    "PatchRule",
    "PatchRegistry",
    "default_patch_registry",
    "register_patch_mapping",
    "unregister_patch_mapping",
    "get_patch_mapping",
    "clear_patch_mapping",
    "resolve_rule",
    "MappingLike",
]

# A mapping, a Spec (anything with `.patches`), a PatchRule, or None for the process-wide registry.
MappingLike = Union[Mapping[str, type], Any, None]


def check_replacement(key: Any, replacement: Any) -> None:
    """Raise TypeError unless `key` is a string and `replacement` a class that subclasses `nn.Module`."""
    if not isinstance(key, str):
        raise TypeError(f"Patch mapping keys are class names or regex patterns (str), got {key!r}.")
    if not isinstance(replacement, type):
        raise TypeError(
            f"Replacement for '{key}' must be a class, got {type(replacement).__name__} ({replacement!r}); "
            "map each key to the nn.Module subclass to build instead."
        )
    if not issubclass(replacement, nn.Module):
        bases = [c.__name__ for c in replacement.__mro__[1:]]
        raise TypeError(
            f"Replacement class for '{key}' must be a subclass of nn.Module, got {replacement.__name__} which "
            f"inherits from {bases} ({replacement.__module__}.{replacement.__qualname__}); derive it from torch.nn.Module."
        )


class PatchRegistry:
    """A thread-safe, ordered `pattern -> replacement class` registry.

    Every operation validates its whole argument before changing anything, so a call that raises
    leaves the registry as it was.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._mapping: dict[str, type[nn.Module]] = {}

    def register(self, mapping: Mapping[str, type[nn.Module]], overwrite: bool = False) -> None:
        """Add `mapping`; ValueError for a key already registered unless `overwrite`, TypeError for a bad value."""
        items = list(mapping.items())
        for key, replacement in items:
            check_replacement(key, replacement)
        with self._lock:
            if not overwrite:
                taken = [key for key, _ in items if key in self._mapping]
                if taken:
                    raise ValueError(
                        f"Class '{taken[0]}' already has a patch mapping registered. Use overwrite=True to replace it. "
                        f"(yamltrace: it maps to {self._mapping[taken[0]].__qualname__}; nothing was registered.)"
                    )
            self._mapping.update(items)

    def unregister(self, keys: Iterable[str]) -> None:
        """Remove `keys`; ValueError (removing nothing) when one of them is not registered."""
        keys = [keys] if isinstance(keys, str) else list(keys)
        with self._lock:
            unknown = [key for key in keys if key not in self._mapping]
            if unknown:
                raise ValueError(
                    f"Class or pattern '{unknown[0]}' not found in monkey patch mapping cache. Cannot unregister a "
                    f"class that is not registered. (yamltrace: nothing was removed; spell the key as it was "
                    f"registered: {list(self._mapping)}.)"
                )
            for key in keys:
                del self._mapping[key]

    def get(self) -> dict[str, type[nn.Module]]:
        """A copy of the mapping, in registration order."""
        with self._lock:
            return dict(self._mapping)

    def clear(self) -> None:
        """Remove every mapping."""
        with self._lock:
            self._mapping.clear()


default_patch_registry = PatchRegistry()


def register_patch_mapping(mapping: Mapping[str, type[nn.Module]], overwrite: bool = False) -> None:
    """Register class replacements, process-wide: `{"Qwen2MoeExperts": MyExperts, ".*Attention": MyAttention}`.

    Keys are exact class names or regexes (tried with `search`, in linear time; anchor with `^...$`);
    an exact name beats a regex. Raises ValueError for a key already registered unless
    `overwrite=True`, and TypeError for a replacement that is not an `nn.Module` subclass; either way
    nothing is registered.

    Warning: this mapping is global. Prefer passing a mapping or a `Spec` to `apply_patches`,
    `patch_output_recorders` and `patch_model`.

    Args:
        mapping: class name or regex -> replacement class.
        overwrite: replace keys that are already registered.
    """
    default_patch_registry.register(mapping, overwrite=overwrite)


def unregister_patch_mapping(keys: Iterable[str]) -> None:
    """Remove registered keys (exactly as registered); ValueError, removing nothing, for an unknown key.

    Args:
        keys: the keys to remove, spelled as they were registered.
    """
    default_patch_registry.unregister(keys)


def get_patch_mapping() -> dict[str, type[nn.Module]]:
    """A copy of the registered mapping, in registration order."""
    return default_patch_registry.get()


def clear_patch_mapping() -> None:
    """Remove every registered mapping."""
    default_patch_registry.clear()


def resolve_rule(mapping: MappingLike, device: str | None = None) -> PatchRule:
    """The `PatchRule` of a mapping, a `Spec` (its entries for `device`), a rule, or None (the registry).

    Replacements are checked as `register_patch_mapping` checks them (TypeError).
    """
    if isinstance(mapping, PatchRule):
        return mapping
    if mapping is None:
        rule = PatchRule(get_patch_mapping())
    elif isinstance(mapping, Mapping):
        rule = PatchRule(mapping)
    elif hasattr(mapping, "patches"):
        rule = PatchRule.for_entries(mapping.patches, device)
    else:
        raise TypeError(
            f"Expected a patch mapping (dict of pattern -> nn.Module class), a Spec or None, got {type(mapping).__name__}."
        )
    for key, replacement in rule.mapping.items():
        check_replacement(key, replacement)
    return rule
