"""ClassRegistry: registration, plugin entry points, resolution order, caching and error messages."""

from __future__ import annotations

import sys

import pytest
from helpers import DATA
from torch import nn

import yamltrace.examples.tiny
from yamltrace.errors import SpecError
from yamltrace.spec import (
    ENTRY_POINT_GROUP,
    ClassRegistry,
    ImportPolicy,
    default_registry,
    list_classes,
    register_class,
    resolve_class,
    unregister_class,
)

PLUGINS = DATA / "plugins"
TRUSTED = ImportPolicy(trust=True)


@pytest.fixture
def plugins(monkeypatch: pytest.MonkeyPatch):
    """tests/data/plugins on sys.path; its modules are forgotten afterwards so each test imports them afresh."""
    default_registry.list()  # discover the default registry's plugins before the test plugin is on the path
    monkeypatch.syspath_prepend(str(PLUGINS))
    yield
    for name in [m for m in sys.modules if m == "ytplugins" or m.startswith("ytplugins.")]:
        del sys.modules[name]


class Custom(nn.Module):
    pass


class Other(nn.Module):
    pass


def test_register_get_unregister() -> None:
    registry = ClassRegistry(entry_point_group=None)
    assert registry.register("Custom", Custom) is Custom
    assert registry.get("Custom") is Custom
    assert "Custom" in registry
    assert registry.unregister("Custom") is Custom
    assert registry.get("Custom") is None
    assert "Custom" not in registry


def test_duplicate_and_unknown_names_raise_value_error() -> None:
    registry = ClassRegistry(entry_point_group=None)
    registry.register("Custom", Custom)
    with pytest.raises(ValueError, match="'Custom' is already registered"):
        registry.register("Custom", Other)
    assert registry.get("Custom") is Custom
    with pytest.raises(ValueError, match="'Missing' is not registered"):
        registry.unregister("Missing")


@pytest.mark.parametrize("bad", [Custom(), lambda: Custom, "Custom"])
def test_register_refuses_non_classes(bad: object) -> None:
    registry = ClassRegistry(entry_point_group=None)
    with pytest.raises(TypeError, match="needs a class"):
        registry.register("Bad", bad)  # type: ignore[arg-type]
    assert registry.list() == []


def test_list_filters_with_fnmatch_patterns() -> None:
    registry = ClassRegistry(entry_point_group=None)
    for name, cls in [("FusedAttention", Custom), ("FusedMLP", Other), ("SlowAttention", Custom)]:
        registry.register(name, cls)
    assert registry.list() == ["FusedAttention", "FusedMLP", "SlowAttention"]
    assert registry.list("Fused*") == ["FusedAttention", "FusedMLP"]
    assert registry.list(["*MLP", "Slow*"]) == ["FusedMLP", "SlowAttention"]


def test_register_class_as_function_and_decorators() -> None:
    try:
        assert register_class("SpecCustom", Custom) is Custom

        @register_class
        class Decorated(nn.Module):
            pass

        @register_class("SpecNamed")
        class Named(nn.Module):
            pass

        assert list_classes("Spec*") == ["SpecCustom", "SpecNamed"]
        assert default_registry.get("Decorated") is Decorated
        assert resolve_class("SpecNamed") is Named
    finally:
        for name in ("SpecCustom", "Decorated", "SpecNamed"):
            if name in default_registry:
                unregister_class(name)
    assert "Decorated" not in default_registry


def test_registered_name_wins_over_imports() -> None:
    registry = ClassRegistry(entry_point_group=None)
    assert registry.resolve("Linear", imports=["torch.nn"]) is nn.Linear
    registry.register("Linear", Custom)
    assert registry.resolve("Linear", imports=["torch.nn"]) is Custom


def test_paths_with_colon_and_dot() -> None:
    registry = ClassRegistry(entry_point_group=None)
    assert registry.resolve("torch.nn:Linear") is nn.Linear
    assert registry.resolve("torch.nn.Linear") is nn.Linear
    assert registry.resolve("yamltrace.examples.tiny:TinyAttention") is yamltrace.examples.tiny.TinyAttention


def test_nested_qualname(plugins: None) -> None:
    from ytplugins import objects

    assert ClassRegistry(entry_point_group=None).resolve("ytplugins.objects:Outer.Inner") is objects.Outer.Inner


def test_bare_names_follow_imports_in_order_then_the_model_module(plugins: None) -> None:
    from ytplugins import objects

    registry = ClassRegistry(entry_point_group=None)
    assert registry.resolve("Identity", imports=["ytplugins.objects", "torch.nn"]) is objects.Identity
    assert registry.resolve("Identity", imports=["torch.nn", "ytplugins.objects"]) is nn.Identity
    assert registry.resolve("Identity", model_module="ytplugins.objects") is objects.Identity
    assert registry.resolve("Identity", imports=["torch.nn"], model_module="ytplugins.objects") is nn.Identity


def test_not_found_lists_searched_modules_and_suggests_close_names() -> None:
    registry = ClassRegistry(entry_point_group=None)
    registry.register("TinyAttentionFused", Custom)
    with pytest.raises(SpecError) as info:
        registry.resolve("TinyAtention", imports=["torch.nn"], model_module="yamltrace.examples.tiny")
    message = str(info.value)
    assert "class 'TinyAtention' not found" in message
    assert "modules 'torch.nn', 'yamltrace.examples.tiny'" in message
    assert "'yamltrace.examples.tiny'; did you mean 'TinyAttention', 'TinyAttentionFused' or 'MultiheadAttention'?" in message


def test_bare_name_without_imports_says_where_to_add_the_module() -> None:
    with pytest.raises(SpecError, match="add the class's module to `imports`"):
        ClassRegistry(entry_point_group=None).resolve("LlamaAttention")


def test_missing_attribute_on_a_path_suggests_names() -> None:
    with pytest.raises(SpecError, match=r"module 'torch.nn' has no attribute 'Linaer'; did you mean 'Linear' or 'LazyLinear'\?$"):
        ClassRegistry(entry_point_group=None).resolve("torch.nn:Linaer")


def test_missing_module_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match="cannot import module 'torch.no_such_module'"):
        ClassRegistry(entry_point_group=None).resolve("torch.no_such_module:Thing")


@pytest.mark.parametrize("name", ["torch.nn:", ":Linear", "torch..nn:Linear", "torch.nn:Linear()", "a b"])
def test_malformed_references_are_spec_errors(name: str) -> None:
    with pytest.raises(SpecError):
        ClassRegistry(entry_point_group=None).resolve(name, policy=TRUSTED)


def test_subclass_of_is_checked_on_the_resolved_object() -> None:
    registry = ClassRegistry(entry_point_group=None)
    assert registry.resolve("torch.nn:Linear", subclass_of=nn.Module) is nn.Linear
    with pytest.raises(SpecError, match=r"'torch:Tensor' resolves to class torch\.Tensor, which is not a subclass of torch\.nn"):
        registry.resolve("torch:Tensor", subclass_of=nn.Module)


def test_resolution_is_cached_until_the_registry_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = ClassRegistry(entry_point_group=None)
    mlp = yamltrace.examples.tiny.TinyMLP
    assert registry.resolve("TinyMLP", imports=["yamltrace.examples.tiny"]) is mlp
    monkeypatch.delattr(yamltrace.examples.tiny, "TinyMLP")
    assert registry.resolve("TinyMLP", imports=["yamltrace.examples.tiny"]) is mlp
    registry.register("Unrelated", Custom)  # any change clears the cache
    with pytest.raises(SpecError, match="'TinyMLP' not found"):
        registry.resolve("TinyMLP", imports=["yamltrace.examples.tiny"])


def test_entry_point_plugins_are_discovered_but_imported_only_when_used(plugins: None) -> None:
    from ytplugins import flags

    registry = ClassRegistry()
    assert registry.entry_point_group == ENTRY_POINT_GROUP == "yamltrace.classes"
    assert registry.list("*Plugin*") == ["BrokenPlugin", "PluginLayer"]
    assert "ytplugins.entry" not in flags.IMPORTED
    cls = registry.resolve("PluginLayer", subclass_of=nn.Module)
    assert cls.__module__ == "ytplugins.entry" and cls.__name__ == "PluginLayer"
    assert flags.IMPORTED == ["ytplugins.entry"]
    with pytest.raises(ValueError, match="'PluginLayer' is already registered .plugin ytplugins.entry:PluginLayer"):
        registry.register("PluginLayer", Custom)


def test_a_plugin_that_is_not_a_class_is_refused(plugins: None) -> None:
    with pytest.raises(SpecError, match=r"plugin 'BrokenPlugin' \(ytplugins.entry:not_a_class\) is the function"):
        ClassRegistry().resolve("BrokenPlugin")


def test_registry_without_group_has_no_plugins(plugins: None) -> None:
    assert ClassRegistry(entry_point_group=None).list() == []


def test_a_function_in_an_allowed_module_is_not_a_class() -> None:
    with pytest.raises(SpecError, match=r"'torch:zeros' is the function [\w.]*zeros, not a class"):
        ClassRegistry(entry_point_group=None).resolve("torch:zeros")


def test_a_cached_class_whose_module_was_forgotten_is_imported_again(plugins: None) -> None:
    from ytplugins import flags

    registry = ClassRegistry(entry_point_group=None)
    first = registry.resolve("ytplugins.side_effect:SideEffectLayer", policy=TRUSTED)
    del sys.modules["ytplugins.side_effect"]
    with pytest.raises(SpecError, match="'ytplugins.side_effect' is not imported yet"):
        registry.resolve("ytplugins.side_effect:SideEffectLayer")
    second = registry.resolve("ytplugins.side_effect:SideEffectLayer", policy=TRUSTED)
    assert second is not first and second.__qualname__ == first.__qualname__
    assert flags.IMPORTED == ["ytplugins.side_effect", "ytplugins.side_effect"]
