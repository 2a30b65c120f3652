"""The patch mapping: class name or regex -> replacement `nn.Module` class, and its lookup rules.

The rules are transformers 5.x's (`transformers.monkey_patching`): an exact class name beats a regex;
otherwise keys are tried as regexes with `search`, in registration order; an invalid regex never
matches. Regexes run on RE2 (linear time, see `yamltrace.spec._patterns`), so no key can hang a
lookup; a key RE2 cannot run (a backreference or lookaround, which only Python code can register: a
spec's keys are vetted when it is validated) runs on Python's `re`. The process-wide registry exists because that API demands it; it is guarded by a lock, and
every function that reads it also takes an explicit mapping or a `Spec` instead.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any, Union

from torch import nn

from ..spec._patterns import Pattern, PatternError, compile_pattern
from ._handle import device_matches

__all__ = [
    "PatchRegistry",
    "default_patch_registry",
    "register_patch_mapping",
    "unregister_patch_mapping",
    "get_patch_mapping",
    "clear_patch_mapping",
    "find_replacement",
    "resolve_mapping",
    "MappingLike",
]

logger = logging.getLogger("yamltrace")

# A mapping, a Spec (anything with `.patches`), or None for the process-wide registry.
MappingLike = Union[Mapping[str, type], Any, None]


@functools.lru_cache(maxsize=1024)
def _compile(pattern: str) -> Pattern | None:
    """The compiled regex for `pattern` (RE2 when it can run it), or None when it is not a valid regex."""
    try:
        return compile_pattern(pattern)
    except PatternError:
        pass
    try:
        return re.compile(pattern)
    except (re.error, OverflowError, RecursionError, ValueError) as error:
        logger.warning("Patch pattern %r is not a valid regex (%s); it matches exact class names only.", pattern[:100], error)
        return None


def find_replacement(class_name: str, mapping: Mapping[str, type]) -> type | None:
    """The replacement `mapping` gives `class_name`: an exact key first, then the first regex that matches."""
    if class_name in mapping:
        return mapping[class_name]
    for pattern, replacement in mapping.items():
        compiled = _compile(pattern)
        if compiled is not None and compiled.search(class_name):
            return replacement
    return None


def find_key(class_name: str, mapping: Mapping[str, type]) -> str | None:
    """The key of `mapping` that selects `class_name` under the same rules as `find_replacement`."""
    if class_name in mapping:
        return class_name
    for pattern in mapping:
        compiled = _compile(pattern)
        if compiled is not None and compiled.search(class_name):
            return pattern
    return None


def check_replacement(key: Any, replacement: Any) -> None:
    """Raise TypeError unless `key` is a string and `replacement` a class that subclasses `nn.Module`."""
    if not isinstance(key, str):
        raise TypeError(f"Patch mapping keys are class names or regex patterns (str), got {key!r}.")
    if not isinstance(replacement, type):
        raise TypeError(f"Replacement for {key!r} must be a class, got {type(replacement).__name__} ({replacement!r}).")
    if not issubclass(replacement, nn.Module):
        bases = [c.__name__ for c in replacement.__mro__[1:]]
        raise TypeError(
            f"Replacement class for {key!r} must be a subclass of torch.nn.Module, got "
            f"{replacement.__module__}.{replacement.__qualname__} which inherits from {bases}."
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
                        f"Class or pattern {taken[0]!r} already has a patch mapping registered "
                        f"(to {self._mapping[taken[0]].__qualname__}). Use overwrite=True to replace it."
                    )
            self._mapping.update(items)

    def unregister(self, keys: Iterable[str]) -> None:
        """Remove `keys`; ValueError (removing nothing) when one of them is not registered."""
        keys = [keys] if isinstance(keys, str) else list(keys)
        with self._lock:
            unknown = [key for key in keys if key not in self._mapping]
            if unknown:
                raise ValueError(
                    f"Class or pattern {unknown[0]!r} is not in the patch mapping, so it cannot be unregistered. "
                    f"Registered keys: {list(self._mapping)}."
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

    Keys are exact class names or regexes (`re.search`; anchor with `^...$`); an exact name beats a
    regex. Raises ValueError for a key already registered unless `overwrite=True`, and TypeError for a
    replacement that is not an `nn.Module` subclass; either way nothing is registered.

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


def resolve_mapping(mapping: MappingLike, device: str | None = None) -> dict[str, type[nn.Module]]:
    """An ordered `pattern -> replacement` dict from a mapping, a `Spec` or None (the registry).

    A Spec's entries whose `device` condition does not hold on `device` are left out (an entry without
    one applies everywhere; see `device_matches`). Replacements are checked as `register_patch_mapping` does.
    """
    if mapping is None:
        return get_patch_mapping()
    if isinstance(mapping, Mapping):
        resolved = dict(mapping)
    elif hasattr(mapping, "patches"):
        resolved = {}
        for entry in mapping.patches:
            wanted = getattr(entry, "device", None)
            if wanted is None or device is None or device_matches(wanted, device):
                resolved.setdefault(entry.pattern, entry.replacement)
    else:
        raise TypeError(
            f"Expected a patch mapping (dict of pattern -> nn.Module class), a Spec or None, got {type(mapping).__name__}."
        )
    for key, replacement in resolved.items():
        check_replacement(key, replacement)
    return resolved
