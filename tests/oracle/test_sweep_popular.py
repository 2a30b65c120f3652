"""The architecture sweep on the popular families, in the default suite: one test per class and variant.

Every class of these families that records outputs (base models and task heads) must build as a tiny
model, run, and give captures `torch.equal` to its own outputs under the three variants of
`oracle.sweep` (a: `trace(model)`, b: `trace` with the exported spec through YAML, c: the forward
re-decorated with yamltrace's decorators). The full sweep over every family is `make fidelity`.
Models are built once per class for the whole module.
"""

from __future__ import annotations

import functools
import os

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"

from oracle.sweep import POPULAR, VARIANTS, Built, build, enumerate_targets, run_variant  # noqa: E402

pytestmark = pytest.mark.oracle

TARGETS = enumerate_targets(POPULAR)
BY_ID = {target.id: target for target in TARGETS}

# Variants known to differ, "class:variant" -> reason (strict xfail: a stale entry cannot hide). None at present.
KNOWN_GAPS: dict[str, str] = {}


@functools.cache
def built(target_id: str) -> Built:
    return build(BY_ID[target_id])


def test_every_popular_family_has_classes() -> None:
    families = {target.family for target in TARGETS}
    assert families == set(POPULAR), f"no classes found for {set(POPULAR) - families}"


@pytest.mark.parametrize("target_id", sorted(BY_ID))
def test_builds_runs_and_returns_its_keys(target_id: str) -> None:
    model = built(target_id)
    # At its top level, or inside nested outputs (CLIPModel's text_model_output, vision_model_output).
    assert model.compared, f"{target_id}: its own output returns none of {model.keys}"


def test_a_dual_encoder_is_compared_in_both_towers() -> None:
    model = built("clip.CLIPModel")
    assert model.compared == [
        f"{part}_output.{key}" for part in ("text_model", "vision_model") for key in ("hidden_states", "attentions")
    ]


def _cases() -> list:
    cases = []
    for target_id in sorted(BY_ID):
        for variant in VARIANTS:
            reason = KNOWN_GAPS.get(f"{target_id}:{variant}")
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            cases.append(pytest.param(target_id, variant, id=f"{target_id}-{variant}", marks=marks))
    return cases


@pytest.mark.parametrize(("target_id", "variant"), _cases())
def test_captures_equal_the_models_own_outputs(target_id: str, variant: str) -> None:
    outcome = run_variant(built(target_id), variant)
    assert outcome == "equal", f"{target_id}, variant {variant}: {outcome}"


# Beyond the popular families: one class of each kind the comparison itself handles specially.
SPECIAL = enumerate_targets(("m2m_100", "big_bird", "ministral"))


@functools.cache
def built_special(target_id: str) -> Built:
    return build(next(target for target in SPECIAL if target.id == target_id))


def test_a_decorated_class_with_an_empty_map_is_compared_on_its_nested_models_keys() -> None:
    model = built_special("m2m_100.M2M100Model")
    assert model.nested_map and model.keys == ["hidden_states", "attentions", "cross_attentions"]
    assert model.compared == [
        "cross_attentions",
        "decoder_hidden_states",
        "decoder_attentions",
        "encoder_hidden_states",
        "encoder_attentions",
    ]
    assert [run_variant(model, variant) for variant in VARIANTS] == ["equal"] * 3


def test_a_model_that_replaces_modules_on_its_first_forward_is_warmed_up() -> None:
    model = built_special("big_bird.BigBirdModel")
    assert model.swapped == "its first forward replaced BigBirdBlockSparseAttention -> BigBirdSelfAttention"
    assert len(model.expected["attentions"]) == 2  # the first forward alone returns none: hooks on the old modules
    assert [run_variant(model, variant) for variant in VARIANTS] == ["equal"] * 3
    assert model.b_export == model.swapped  # the class's structure is not the instance's: exported from it


def test_a_class_whose_default_config_does_not_build_on_meta_exports_b_from_the_instance() -> None:
    model = built_special("ministral.MinistralForCausalLM")
    assert run_variant(model, "b") == "equal"
    assert model.b_export.startswith("its default config does not build on the meta device (TypeError")
    llama = built("llama.LlamaForCausalLM")
    assert run_variant(llama, "b") == "equal" and llama.b_export == ""
