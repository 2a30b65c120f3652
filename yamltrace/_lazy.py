"""Lazy re-exports for a package face: names load from their private module on first use.

`yamltrace` and `yamltrace.spec` use it so that validating a spec never imports torch. The core
install (`pip install yamltrace`) has no torch: using a name that needs it raises an ImportError
that names the extra to install, instead of a bare `No module named 'torch'`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["TORCH_EXTRA", "lazy_exports", "missing_extra", "missing_extra_message"]

TORCH_EXTRA = "yamltrace[torch]"

# Top-level modules that only the `torch` extra installs.
_TORCH_EXTRA_MODULES = frozenset({"torch", "safetensors"})


def missing_extra(error: ModuleNotFoundError, what: str) -> ImportError | None:
    """An ImportError saying which extra provides the module `error` is about, or None when no extra does."""
    root = (error.name or "").partition(".")[0]
    if root not in _TORCH_EXTRA_MODULES:
        return None
    return ImportError(
        f"{what} needs {root}, which is not installed: pip install '{TORCH_EXTRA}' "
        f"(or install {root} yourself). The core install only validates specs and prints the schema.",
        name=error.name,
    )


def missing_extra_message(error: ImportError, what: str) -> str | None:
    """The one line to print when `error` is about a module of the `torch` extra (raw, or as `missing_extra`
    worded it for a lazy name), else None: an error of another kind is not the install's to fix."""
    friendly = missing_extra(ModuleNotFoundError(str(error), name=error.name), what)
    return None if friendly is None else str(friendly)


def lazy_exports(
    package: str, namespace: dict[str, Any], exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The `__getattr__` and `__dir__` of `package`: `exports` maps a public name to its module (relative)."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        try:
            value = getattr(importlib.import_module(module, package), name)
        except ModuleNotFoundError as e:
            friendly = missing_extra(e, f"{package}.{name}")
            if friendly is None:
                raise
            raise friendly from e
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
