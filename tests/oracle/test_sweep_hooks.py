"""The sweep's per-class hooks name classes and fields the installed transformers has.

A hook keyed by a class that no longer exists would silently stop applying, and a config path that
names no sub-config would fail only when the full sweep reaches that class; both are checked here,
cheaply (no model is built).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pkgutil

import pytest
from packaging.version import Version

os.environ["HF_HUB_OFFLINE"] = "1"

import transformers
from oracle.sweep._class_inputs import CLASS_INPUTS, FAMILIES_SINCE
from oracle.sweep._configs import CLASS_OVERRIDES, POST_OVERRIDES, tiny_config

pytestmark = pytest.mark.oracle


def _modeling_class(target_id: str) -> type | None:
    """The class `family.Name` names in one of `transformers.models.<family>`'s modeling modules."""
    family, _, name = target_id.partition(".")
    package = importlib.import_module(f"transformers.models.{family}")
    for module in pkgutil.iter_modules(package.__path__):
        if module.name.startswith("modeling_"):
            found = getattr(importlib.import_module(f"{package.__name__}.{module.name}"), name, None)
            if isinstance(found, type):
                return found
    return None


@pytest.mark.parametrize("target_id", sorted(CLASS_INPUTS))
def test_input_hooks_name_modeling_classes(target_id: str) -> None:
    family = target_id.partition(".")[0]
    since = FAMILIES_SINCE.get(family)
    if since is not None and Version(transformers.__version__) < Version(since):
        # A hook for a family a later release added: the family must really be absent here.
        assert importlib.util.find_spec(f"transformers.models.{family}") is None, (family, since)
        return
    assert _modeling_class(target_id) is not None, f"transformers has no class {target_id!r}"


PATHS = sorted(name for name, fields in CLASS_OVERRIDES.items() if any("." in field for field in fields))


@pytest.mark.parametrize("name", PATHS)
def test_class_override_paths_reach_the_tiny_config(name: str) -> None:
    config = tiny_config(getattr(transformers, name))
    for path, value in CLASS_OVERRIDES[name].items():
        owner, _, field = path.rpartition(".")
        assert getattr(getattr(config, owner) if owner else config, field) == value, path


def test_post_overrides_reach_the_sub_config() -> None:
    config = tiny_config(transformers.Granite4VisionModel)
    assert POST_OVERRIDES["granite4_vision"] == {"qformer_config.num_attention_heads": 2}
    assert config.qformer_config.num_attention_heads == 2  # its post-init derives vision width // 64 = 0
