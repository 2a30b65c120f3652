"""The patch mapping registry: transformers' rules one by one, atomicity, thread safety, spec resolution."""

from __future__ import annotations

import threading

import pytest
from helpers import patch_spec, selected, swapped
from torch import nn

from yamltrace.patch import (
    clear_patch_mapping,
    get_patch_mapping,
    register_patch_mapping,
    unregister_patch_mapping,
)


class A(nn.Module):
    pass


class B(nn.Module):
    pass


class C(nn.Module):
    pass


def test_exact_name_beats_a_regex_registered_before_it():
    register_patch_mapping({".*Attention": A, "LlamaAttention": B})
    mapping = get_patch_mapping()
    assert selected(mapping, "LlamaAttention") is B
    assert selected(mapping, "MistralAttention") is A


def test_regex_uses_search_so_unanchored_patterns_match_anywhere():
    mapping = {"Attention": A, "^Llama\\d+Attention$": B}
    assert selected(mapping, "LlamaAttentionBlock") is A
    assert selected(mapping, "Llama3Attention") is A  # the first registered regex that matches
    assert selected(mapping, "Llama3MLP") is None


def test_anchored_pattern_does_not_match_a_longer_name():
    mapping = {"^Llama\\d+Attention$": B}
    assert selected(mapping, "Llama3Attention") is B
    assert selected(mapping, "Llama3AttentionX") is None
    assert selected(mapping, "LlamaAttention") is None


def test_regexes_are_tried_in_registration_order():
    register_patch_mapping({"Attn": A})
    register_patch_mapping({"Self": B})
    assert selected(get_patch_mapping(), "SelfAttn") is A
    unregister_patch_mapping(["Attn"])
    register_patch_mapping({"Attn": A})
    assert list(get_patch_mapping()) == ["Self", "Attn"]
    assert selected(get_patch_mapping(), "SelfAttn") is B


def test_invalid_regex_never_matches_and_does_not_hide_later_patterns():
    mapping = {"Foo(": A, "Bar": B}
    assert selected(mapping, "Foo") is None
    assert selected(mapping, "Foo(Bar") is B
    assert selected(mapping, "Foo(") is A  # still an exact name
    assert selected(mapping, "FooBar") is B  # the key "Bar"


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
    assert selected(get_patch_mapping(), "X") is None


def test_concurrent_registrations_all_land():
    barrier = threading.Barrier(8)

    def work(i: int) -> None:
        barrier.wait()
        for j in range(50):
            register_patch_mapping({f"K{i}_{j}": A})

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(get_patch_mapping()) == 400


def test_concurrent_claims_of_one_key_let_exactly_one_win():
    barrier = threading.Barrier(8)
    outcomes: list[str] = []
    lock = threading.Lock()

    def work(cls: type) -> None:
        barrier.wait()
        try:
            register_patch_mapping({"Shared": cls})
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
    assert get_patch_mapping()["Shared"] in classes


def test_a_patch_argument_is_the_registry_a_mapping_or_a_spec():
    register_patch_mapping({"X": A})
    assert swapped(None, "X", "Y") == {"X": A}
    assert swapped({"Y": B}, "X", "Y") == {"Y": B}
    spec = patch_spec(("Attn", A, "cuda"), ("Attn2", B, "cpu"), ("MLP", C))
    names = ("Attn", "Attn2", "MLP")
    assert swapped(spec, *names, device="cpu") == {"Attn2": B, "MLP": C}
    assert swapped(spec, *names, device="cuda") == {"Attn": A, "Attn2": A, "MLP": C}  # "Attn" searches "Attn2"
    assert swapped(spec, *names, device="mps") == {"MLP": C}


def test_a_patch_argument_has_its_replacements_and_type_checked():
    with pytest.raises(TypeError, match="must be a subclass of nn.Module"):
        swapped({"X": int})
    with pytest.raises(TypeError, match="must be a class"):
        swapped(patch_spec(("X", "not.a.Class")))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Expected a patch mapping"):
        swapped(["X"])
