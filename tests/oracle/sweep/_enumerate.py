"""Which transformers classes the sweep covers: every model class that records outputs.

A class is enumerated when it is a concrete `PreTrainedModel` subclass defined in a
`transformers.models.<family>.modeling_<name>` module and either has a non-empty
`_can_record_outputs` (its own or inherited) or a `forward` that carries transformers'
`capture_outputs` decorator. The abstract `<Family>PreTrainedModel` bases are left out: they have no
modules and no forward of their own.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from dataclasses import dataclass
from typing import Any

__all__ = ["Target", "POPULAR", "enumerate_targets", "import_failures", "capture_decorator_code", "is_decorated"]

# Families whose every class (base and heads) runs in the default test suite.
POPULAR = (
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "gemma",
    "gemma2",
    "gemma3",
    "phi3",
    "gpt2",
    "gpt_neox",
    "opt",
    "bert",
    "roberta",
    "t5",
    "bart",
    "whisper",
    "vit",
    "clip",
    "siglip",
    "mixtral",
    "qwen2_moe",
    "deepseek_v3",
)


@dataclass(frozen=True, order=True)
class Target:
    """One class to compare: its family (the `transformers.models` package), module and class name."""

    family: str
    module: str
    name: str

    def load(self) -> type:
        return getattr(importlib.import_module(self.module), self.name)

    @property
    def id(self) -> str:
        return f"{self.family}.{self.name}"


def capture_decorator_code() -> Any:
    """The code object of transformers' `capture_outputs` wrapper (what every decorated forward runs)."""
    from transformers.utils.output_capturing import capture_outputs

    return capture_outputs(lambda self: None).__code__


def is_decorated(cls: type, code: Any = None) -> bool:
    """Whether `cls.forward`, followed through `__wrapped__`, carries transformers' capture decorator."""
    code = capture_decorator_code() if code is None else code
    forward = getattr(cls, "forward", None)
    while forward is not None:
        if getattr(forward, "__code__", None) is code:
            return True
        forward = getattr(forward, "__wrapped__", None)
    return False


_IMPORT_FAILURES: dict[str, str] = {}


def import_failures() -> dict[str, str]:
    """Modeling modules that could not be imported during enumeration (module -> reason)."""
    return dict(_IMPORT_FAILURES)


def _modeling_modules() -> list[tuple[str, str]]:
    import transformers.models as models

    found = []
    for family in pkgutil.iter_modules(models.__path__):
        if not family.ispkg:
            continue
        package = f"{models.__name__}.{family.name}"
        spec = importlib.util.find_spec(package)
        locations = spec.submodule_search_locations if spec is not None else None
        for sub in pkgutil.iter_modules(locations or []):
            if sub.name.startswith("modeling_") and not sub.name.startswith(("modeling_tf_", "modeling_flax_")):
                found.append((family.name, f"{package}.{sub.name}"))
    return found


def enumerate_targets(families: tuple[str, ...] | None = None) -> list[Target]:
    """Every class the sweep covers, sorted by family then name (`families` restricts the search)."""
    from transformers import PreTrainedModel

    code = capture_decorator_code()
    targets = []
    for family, module_name in _modeling_modules():
        if families is not None and family not in families:
            continue
        try:
            module = importlib.import_module(module_name)
        except Exception as error:  # a missing optional dependency: reported, never fatal
            _IMPORT_FAILURES[module_name] = f"{type(error).__name__}: {error}"
            continue
        for name, value in vars(module).items():
            if not (inspect.isclass(value) and issubclass(value, PreTrainedModel)) or value.__module__ != module_name:
                continue
            if name.endswith("PreTrainedModel"):
                continue
            if getattr(value, "_can_record_outputs", None) or is_decorated(value, code):
                targets.append(Target(family, module_name, name))
    return sorted(targets)
