"""The patch mapping registry: transformers' rules one by one, atomicity, thread safety, spec resolution."""

from __future__ import annotations

import threading

import pytest
from helpers import patch_spec
from torch import nn

from yamltrace.patch import clear_patch_mapping, get_patch_mapping, register_patch_mapping, unregister_patch_mapping
from yamltrace.patch._registry import PatchRegistry, resolve_rule
from yamltrace.spec._patch_rule import PatchRule


class A(nn.Module):
    pass


class B(nn.Module):
    pass


class C(nn.Module):
    pass


def test_exact_name_beats_a_regex_registered_before_it():
    register_patch_mapping({".*Attention": A, "LlamaAttention": B})
    mapping = get_patch_mapping()
    assert PatchRule(mapping).replacement_for("LlamaAttention") is B
    assert PatchRule(mapping).replacement_for("MistralAttention") is A


def test_regex_uses_search_so_unanchored_patterns_match_anywhere():
    mapping = {"Attention": A, "^Llama\\d+Attention$": B}
    assert PatchRule(mapping).replacement_for("LlamaAttentionBlock") is A
    assert PatchRule(mapping).replacement_for("Llama3Attention") is A  # the first registered regex that matches
    assert PatchRule(mapping).replacement_for("Llama3MLP") is None


def test_anchored_pattern_does_not_match_a_longer_name():
    mapping = {"^Llama\\d+Attention$": B}
    assert PatchRule(mapping).replacement_for("Llama3Attention") is B
    assert PatchRule(mapping).replacement_for("Llama3AttentionX") is None
    assert PatchRule(mapping).replacement_for("LlamaAttention") is None


def test_regexes_are_tried_in_registration_order():
    register_patch_mapping({"Attn": A})
    register_patch_mapping({"Self": B})
    assert PatchRule(get_patch_mapping()).replacement_for("SelfAttn") is A
    unregister_patch_mapping(["Attn"])
    register_patch_mapping({"Attn": A})
    assert list(get_patch_mapping()) == ["Self", "Attn"]
    assert PatchRule(get_patch_mapping()).replacement_for("SelfAttn") is B


def test_invalid_regex_never_matches_and_does_not_hide_later_patterns():
    mapping = {"Foo(": A, "Bar": B}
    assert PatchRule(mapping).replacement_for("Foo") is None
    assert PatchRule(mapping).replacement_for("Foo(Bar") is B
    assert PatchRule(mapping).replacement_for("Foo(") is A  # still an exact name
    assert PatchRule(mapping).key_for("FooBar") == "Bar"


def test_duplicate_key_is_a_value_error_unless_overwrite():
    register_patch_mapping({"X": A})
    with pytest.raises(ValueError, match="'X' already has a patch mapping registered.*overwrite=True"):
        register_patch_mapping({"X": B})
    assert get_patch_mapping() == {"X": A}
    register_patch_mapping({"X": B}, overwrite=True)
    assert get_patch_mapping() == {"X": B}


@pytest.mark.parametrize("bad", [A(), lambda: A, "A", None])
def test_replacement_that_is_not_a_class_is_a_type_error(bad):
    with pytest.raises(TypeError, match="Replacement for 'X' must be a class"):
        register_patch_mapping({"X": bad})


def test_replacement_class_that_is_not_a_module_is_a_type_error():
    class NotAModule:
        pass

    with pytest.raises(TypeError, match="must be a subclass of nn.Module, got NotAModule which inherits from \\['object'\\]"):
        register_patch_mapping({"X": NotAModule})


def test_non_string_key_is_a_type_error():
    with pytest.raises(TypeError, match="keys are class names or regex patterns"):
        register_patch_mapping({A: B})


def test_register_is_all_or_nothing():
    register_patch_mapping({"Taken": A})
    with pytest.raises(TypeError):
        register_patch_mapping({"First": A, "Second": 3})
    with pytest.raises(ValueError):
        register_patch_mapping({"Fresh": A, "Taken": B})
    assert get_patch_mapping() == {"Taken": A}


def test_unregister_unknown_key_is_a_value_error_and_removes_nothing():
    register_patch_mapping({"X": A, "Y": B})
    with pytest.raises(ValueError, match="'Z' not found in monkey patch mapping cache"):
        unregister_patch_mapping(["X", "Z"])
    assert get_patch_mapping() == {"X": A, "Y": B}
    unregister_patch_mapping(["X"])
    assert get_patch_mapping() == {"Y": B}


def test_unregister_takes_a_single_key_as_a_string():
    register_patch_mapping({"Attention": A})
    unregister_patch_mapping("Attention")
    assert get_patch_mapping() == {}


def test_get_returns_a_copy():
    register_patch_mapping({"X": A})
    copy = get_patch_mapping()
    copy["Y"] = B
    del copy["X"]
    assert get_patch_mapping() == {"X": A}


def test_clear_empties_the_mapping():
    register_patch_mapping({"X": A, ".*": B})
    clear_patch_mapping()
    assert get_patch_mapping() == {}
    assert PatchRule(get_patch_mapping()).replacement_for("X") is None


def test_concurrent_registrations_all_land():
    registry = PatchRegistry()
    barrier = threading.Barrier(8)

    def work(i: int) -> None:
        barrier.wait()
        for j in range(50):
            registry.register({f"K{i}_{j}": A})

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(registry.get()) == 400


def test_concurrent_claims_of_one_key_let_exactly_one_win():
    registry = PatchRegistry()
    barrier = threading.Barrier(8)
    outcomes: list[str] = []
    lock = threading.Lock()

    def work(cls: type) -> None:
        barrier.wait()
        try:
            registry.register({"Shared": cls})
            result = "won"
        except ValueError:
            result = "lost"
        with lock:
            outcomes.append(result)

    classes = [type(f"R{i}", (nn.Module,), {}) for i in range(8)]
    threads = [threading.Thread(target=work, args=(cls,)) for cls in classes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["lost"] * 7 + ["won"]
    assert registry.get()["Shared"] in classes


def test_resolve_rule_reads_the_registry_a_mapping_or_a_spec():
    register_patch_mapping({"X": A})
    assert resolve_rule(None).mapping == {"X": A}
    assert resolve_rule({"Y": B}).mapping == {"Y": B}
    spec = patch_spec(("Attn", A, "cuda"), ("Attn2", B, "cpu"), ("MLP", C))
    assert resolve_rule(spec, "cpu").mapping == {"Attn2": B, "MLP": C}
    assert resolve_rule(spec, "cuda").mapping == {"Attn": A, "MLP": C}
    assert list(resolve_rule(spec, "mps").mapping) == ["MLP"]


def test_resolve_rule_checks_replacements_and_types():
    with pytest.raises(TypeError, match="must be a subclass of nn.Module"):
        resolve_rule({"X": int})
    with pytest.raises(TypeError, match="must be a class"):
        resolve_rule(patch_spec(("X", "not.a.Class")))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Expected a patch mapping"):
        resolve_rule(["X"])
