"""The vocabulary as data (`yamltrace._vocabulary`) is the one on docs/vocabulary.md, and its shape rule."""

from __future__ import annotations

import re

from helpers import ROOT

from yamltrace._vocabulary import ATTENTION_WEIGHT_KEYS, VOCABULARY, returns_no_attention_weights, shape_fits

SIZES = {"batch": 2, "seq": 3, "hidden": 16, "heads": 4, "experts": 8}


def test_the_keys_are_those_of_the_page() -> None:
    page = (ROOT / "docs" / "vocabulary.md").read_text(encoding="utf-8")
    documented = re.findall(r"^\| `([a-z_]+)` \|", page, flags=re.MULTILINE)
    assert sorted(documented) == sorted(VOCABULARY)
    assert ATTENTION_WEIGHT_KEYS == {"attentions", "cross_attentions"}


def test_shapes_fit_their_definition_with_known_sizes() -> None:
    assert shape_fits("router_logits", (6, 8), SIZES)
    assert not shape_fits("router_logits", (6, 2), SIZES)  # top-k scores, not logits
    assert shape_fits("attentions", (2, 4, 3, 3), SIZES)
    assert not shape_fits("attentions", (2, 3, 16), SIZES)
    assert shape_fits("mlp_outputs", (6, 16), SIZES)  # [batch*seq, hidden]: a flattened layer (OPT)
    assert shape_fits("hidden_states", (2, 50, 16), {**SIZES, "seq": None})  # an unknown size matches any
    assert shape_fits("a_key_of_mine", (1,), SIZES)


def test_feature_maps_fit_the_keys_of_convolutional_models() -> None:
    assert shape_fits("hidden_states", (2, 64, 8, 8), SIZES)  # a ResNet stage: [batch, channels, height, width]
    assert shape_fits("block_outputs", (2, 128, 4, 4), SIZES)
    assert shape_fits("down_block_outputs", (2, 32, 16, 16), SIZES)
    assert not shape_fits("block_outputs", (2, 16), SIZES)
    assert not shape_fits("mlp_outputs", (2, 64, 8, 8), SIZES)  # only hidden_states has a feature-map form
    assert not shape_fits("hidden_states", (3, 64, 8, 8), SIZES)  # the batch still counts


def test_which_attention_implementations_compute_no_weights() -> None:
    assert [returns_no_attention_weights(i) for i in ("sdpa", "flash_attention_2", "paged|sdpa", "eager", None)] == [
        True, True, True, False, False,
    ]  # fmt: skip
