"""Helpers shared by the tests: comparing captures, counting what a capture left on a model, small Specs."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import torch
from torch import nn

from yamltrace.errors import PatchError
from yamltrace.examples.tiny import TinyConfig, TinyModel
from yamltrace.patch import apply_patches
from yamltrace.spec import PatchEntry, Spec

# The repository root, and the test data (spec fixtures, plugin packages).
ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"


def assert_same(actual: Any, expected: Any, where: str = "output") -> None:
    """Equal structure with tensors `torch.equal`: a tuple or list expected is matched by a tuple of
    the same length (captures are tuples), `None` by `None`, numbers and text by `==`, a mapping key
    by key; any other leaf (a cache object) by its type."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor) and torch.equal(actual, expected), where
    elif isinstance(expected, (tuple, list)):
        assert isinstance(actual, tuple), f"{where}: {type(actual).__name__}, not a tuple"
        assert len(actual) == len(expected), f"{where}: {len(actual)} vs {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_same(a, e, f"{where}[{i}]")
    elif isinstance(expected, dict):
        assert list(actual.keys()) == list(expected.keys()), where
        for key in expected:
            assert_same(actual[key], expected[key], f"{where}[{key!r}]")
    elif expected is None:
        assert actual is None, where
    elif isinstance(expected, (bool, int, float, str)):
        assert actual == expected, where
    else:
        assert type(actual) is type(expected), where


def hook_count(model: nn.Module) -> int:
    """Forward (pre-)hooks and instance-level `forward` attributes on every module of `model`.

    A module of a model nobody intercepts has neither, so the count is 0 exactly when a capture left
    nothing behind.
    """
    return sum(
        len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._forward_hooks_always_called) + int("forward" in m.__dict__)
        for m in model.modules()
    )


def patch_spec(*entries: tuple) -> Spec:
    """A Spec holding only patch entries `(pattern, replacement[, device])`."""
    return Spec(outputs={}, patches=tuple(PatchEntry(e[0], e[1], str(e[1]), *e[2:]) for e in entries))


def swapped(
    mapping: Any, *names: str, base: type[nn.Module] = nn.Module, device: str | None = None
) -> dict[str, type[nn.Module]]:
    """What `apply_patches(mapping, device=device)` puts in place of class attributes with these names
    (fresh subclasses of `base` in a module of their own), by name; a name it leaves alone is absent.
    Checks that each swap is in place inside the block and undone after it."""
    module = types.ModuleType("patch_lookup")
    originals = {name: type(name, (base,), {}) for name in names}
    for name, original in originals.items():
        setattr(module, name, original)
    with apply_patches(mapping, modules=module, device=device) as replaced:
        found = {r.path.removeprefix("patch_lookup."): r.replacement for r in replaced}
        assert {name: getattr(module, name) for name in names} == {**originals, **found}
    assert {name: getattr(module, name) for name in names} == originals
    return found


def selected(mapping: Any, name: str, base: type[nn.Module] = nn.Module, device: str | None = None) -> type[nn.Module] | None:
    """The class `apply_patches` puts in place of a class attribute called `name` (`swapped`), or None."""
    return swapped(mapping, name, base=base, device=device).get(name)


class ConfigPart(nn.Module):
    """A model part built from the config, as the demo model's are (a replacement's constructor is
    checked against the original's)."""

    def __init__(self, config: Any) -> None:
        super().__init__()


def refusal(original: type, replacement: type) -> str | None:
    """The problem `apply_patches` reports for `replacement` in place of `original`, or None when it
    accepts the swap. The module patched holds a stand-in for `original` (a subclass under its name), so
    that even `original` itself is judged as a replacement; it holds the stand-in again afterwards."""
    stand_in = type(original.__name__, (original,), {"__module__": original.__module__, "__qualname__": original.__qualname__})
    module = types.ModuleType("models_under_test")
    setattr(module, original.__name__, stand_in)
    try:
        with apply_patches({original.__name__: replacement}, modules=module):
            pass
    except PatchError as error:
        (problem,) = error.problems
        return problem.message
    finally:
        assert getattr(module, original.__name__) is stand_in
    return None


class HubTiny(TinyModel):
    """The demo model as `from_pretrained` sees a transformers class: no `config_class.load`, so the class
    loads itself (here: freshly built) and the spec is fetched from the Hub on its own, as for transformers."""

    config_class = None  # type: ignore[assignment]

    @classmethod
    def from_pretrained(cls, path: object, **options: object) -> HubTiny:  # type: ignore[override]
        return cls(TinyConfig())
