"""Parity of the patch-mapping API: each test runs on transformers and on yamltrace, with the same assertions.

The behaviours are those transformers' own tests of `transformers.monkey_patching` check (registration,
overwrite, type checks, unregister, clear, copy semantics, `apply_patches` with exact names and
patterns, exact-match precedence, reads during writes, `patch_output_recorders`), written here from
transformers' documented behaviour.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
import torch
from helpers_parity import lib  # noqa: F401 (the fixture)
from helpers_transformers import tiny_llama_config
from torch import nn
from transformers import LlamaModel
from transformers.models.llama import modeling_llama

pytestmark = pytest.mark.oracle


class CustomAttention(modeling_llama.LlamaAttention):
    pass


class OtherAttention(modeling_llama.LlamaAttention):
    pass


class CustomMLP(modeling_llama.LlamaMLP):
    pass


def attention_classes(model: nn.Module) -> set[type]:
    return {type(layer.self_attn) for layer in model.layers}


# ------------------------------------------------------------------------------------------- registry


def test_register_patch_mapping(lib: SimpleNamespace) -> None:
    lib.register_patch_mapping({"LlamaAttention": CustomAttention})
    lib.register_patch_mapping({".*MLP": CustomMLP})  # the mapping grows with each call
    assert lib.get_patch_mapping() == {"LlamaAttention": CustomAttention, ".*MLP": CustomMLP}


def test_register_existing_key_needs_overwrite(lib: SimpleNamespace) -> None:
    lib.register_patch_mapping({"LlamaAttention": CustomAttention})
    with pytest.raises(ValueError, match="already has a patch mapping registered. Use overwrite=True to replace it."):
        lib.register_patch_mapping({"LlamaAttention": OtherAttention})
    assert lib.get_patch_mapping() == {"LlamaAttention": CustomAttention}
    lib.register_patch_mapping({"LlamaAttention": OtherAttention}, overwrite=True)
    assert lib.get_patch_mapping() == {"LlamaAttention": OtherAttention}


@pytest.mark.parametrize("bad", [CustomAttention(tiny_llama_config(), 0), "CustomAttention", 3], ids=["instance", "str", "int"])
def test_register_a_replacement_that_is_not_a_class(lib: SimpleNamespace, bad: object) -> None:
    with pytest.raises(TypeError, match=f"Replacement for 'X' must be a class, got {type(bad).__name__}"):
        lib.register_patch_mapping({"X": bad})
    assert lib.get_patch_mapping() == {}


def test_register_a_class_that_is_not_a_module(lib: SimpleNamespace) -> None:
    class NotAModule:
        pass

    with pytest.raises(
        TypeError,
        match=r"Replacement class for 'X' must be a subclass of nn.Module, got NotAModule which inherits from \['object'\]",
    ):
        lib.register_patch_mapping({"X": NotAModule})
    assert lib.get_patch_mapping() == {}


def test_unregister_patch_mapping(lib: SimpleNamespace) -> None:
    lib.register_patch_mapping({"LlamaAttention": CustomAttention, ".*MLP": CustomMLP})
    lib.unregister_patch_mapping([".*MLP"])
    assert lib.get_patch_mapping() == {"LlamaAttention": CustomAttention}


def test_unregister_a_key_that_is_not_registered(lib: SimpleNamespace) -> None:
    lib.register_patch_mapping({"LlamaAttention": CustomAttention})
    with pytest.raises(ValueError, match="Class or pattern 'Missing' not found in monkey patch mapping cache"):
        lib.unregister_patch_mapping(["Missing"])
    assert lib.get_patch_mapping() == {"LlamaAttention": CustomAttention}


def test_clear_patch_mapping(lib: SimpleNamespace) -> None:
    lib.register_patch_mapping({"LlamaAttention": CustomAttention, ".*MLP": CustomMLP})
    lib.clear_patch_mapping()
    assert lib.get_patch_mapping() == {}


def test_get_patch_mapping_returns_a_copy(lib: SimpleNamespace) -> None:
    lib.register_patch_mapping({"LlamaAttention": CustomAttention})
    copy = lib.get_patch_mapping()
    copy["LlamaMLP"] = CustomMLP
    del copy["LlamaAttention"]
    assert lib.get_patch_mapping() == {"LlamaAttention": CustomAttention}


def test_reads_during_writes_are_safe(lib: SimpleNamespace) -> None:
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def write(i: int) -> None:
        start.wait()
        for j in range(100):
            lib.register_patch_mapping({f"Class{i}_{j}": CustomMLP})

    def read() -> None:
        start.wait()
        for _ in range(200):
            snapshot = lib.get_patch_mapping()
            assert all(value is CustomMLP for value in snapshot.values())

    def guarded(work, *args) -> None:  # type: ignore[no-untyped-def]
        try:
            work(*args)
        except BaseException as error:  # collected: an exception in a thread does not fail the test
            errors.append(error)

    threads = [threading.Thread(target=guarded, args=(write, i)) for i in range(4)]
    threads += [threading.Thread(target=guarded, args=(read,)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(lib.get_patch_mapping()) == 400


# -------------------------------------------------------------------------------------- apply_patches


def test_apply_patches_swaps_classes_inside_the_block_only(lib: SimpleNamespace) -> None:
    lib.register_patch_mapping({"LlamaAttention": CustomAttention})
    with lib.apply_patches():
        patched = LlamaModel(tiny_llama_config())
    assert attention_classes(patched) == {CustomAttention}
    assert modeling_llama.LlamaAttention is not CustomAttention
    assert attention_classes(LlamaModel(tiny_llama_config())) == {modeling_llama.LlamaAttention}


@pytest.mark.parametrize("pattern", [".*Attention$", "^Llama\\d*Attention$", "Attention"])
def test_apply_patches_with_a_pattern(lib: SimpleNamespace, pattern: str) -> None:
    lib.register_patch_mapping({pattern: CustomAttention})
    with lib.apply_patches():
        patched = LlamaModel(tiny_llama_config())
    assert attention_classes(patched) == {CustomAttention}
    assert attention_classes(LlamaModel(tiny_llama_config())) == {modeling_llama.LlamaAttention}


def test_an_anchored_pattern_selects_only_what_it_spells(lib: SimpleNamespace) -> None:
    lib.register_patch_mapping({"^Llama\\d+Attention$": CustomAttention})  # Llama2Attention, not LlamaAttention
    with lib.apply_patches():
        model = LlamaModel(tiny_llama_config())
    assert attention_classes(model) == {modeling_llama.LlamaAttention}


def test_an_exact_name_beats_a_pattern_registered_before_it(lib: SimpleNamespace) -> None:
    lib.register_patch_mapping({".*Attention": OtherAttention})
    lib.register_patch_mapping({"LlamaAttention": CustomAttention})
    with lib.apply_patches():
        model = LlamaModel(tiny_llama_config())
    assert attention_classes(model) == {CustomAttention}


def test_apply_patches_with_nothing_registered_changes_nothing(lib: SimpleNamespace) -> None:
    with lib.apply_patches():
        model = LlamaModel(tiny_llama_config())
    assert attention_classes(model) == {modeling_llama.LlamaAttention}


def test_several_replacements_in_one_block(lib: SimpleNamespace) -> None:
    lib.register_patch_mapping({"LlamaAttention": CustomAttention, "LlamaMLP": CustomMLP})
    with lib.apply_patches():
        model = LlamaModel(tiny_llama_config())
    assert attention_classes(model) == {CustomAttention}
    assert {type(layer.mlp) for layer in model.layers} == {CustomMLP}


# ----------------------------------------------------------------------------- patch_output_recorders


def recorder_model(recorders: object) -> nn.Module:
    """A model (built outside from_pretrained) whose map is `recorders`, over a fresh class each time:
    transformers retargets the class attribute, so a shared class would carry one test into the next."""

    class Block(nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x, x

    class Holder(nn.Module):
        _can_record_outputs = {"hidden_states": recorders}

        def __init__(self) -> None:
            super().__init__()
            self.block = Block()

    return Holder()


class NewAttention(nn.Module):
    pass


@pytest.mark.parametrize("pattern", ["OldAttention", ".*Attention$", "^Old"])
def test_patch_output_recorders_retargets_a_recorder_instance(lib: SimpleNamespace, pattern: str) -> None:
    old = type("OldAttention", (nn.Module,), {})
    model = recorder_model(lib.OutputRecorder(old, index=1, layer_name="block"))
    lib.register_patch_mapping({pattern: NewAttention})
    lib.patch_output_recorders(model)
    recorder = model._can_record_outputs["hidden_states"]
    assert (recorder.target_class, recorder.index, recorder.layer_name) == (NewAttention, 1, "block")


@pytest.mark.parametrize("form", ["class", "name"])
def test_patch_output_recorders_retargets_a_bare_class_or_name(lib: SimpleNamespace, form: str) -> None:
    old = type("OldAttention", (nn.Module,), {})
    model = recorder_model(old if form == "class" else "OldAttention")
    lib.register_patch_mapping({".*Attention": NewAttention})
    lib.patch_output_recorders(model)
    assert model._can_record_outputs["hidden_states"] is NewAttention


def test_patch_output_recorders_retargets_each_recorder_of_a_list(lib: SimpleNamespace) -> None:
    old = type("OldAttention", (nn.Module,), {})
    other = type("OtherBlock", (nn.Module,), {})
    model = recorder_model([old, other, lib.OutputRecorder(old, index=0)])
    lib.register_patch_mapping({"OldAttention": NewAttention})
    lib.patch_output_recorders(model)
    first, second, third = model._can_record_outputs["hidden_states"]
    assert (first, second, third.target_class, third.index) == (NewAttention, other, NewAttention, 0)


def test_patch_output_recorders_without_a_match_changes_nothing(lib: SimpleNamespace) -> None:
    old = type("OldAttention", (nn.Module,), {})
    model = recorder_model(old)
    lib.register_patch_mapping({"SomethingElse": NewAttention})
    lib.patch_output_recorders(model)
    assert model._can_record_outputs["hidden_states"] is old
