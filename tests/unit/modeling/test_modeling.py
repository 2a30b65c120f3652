"""ModelOutput, Config's JSON round trip and `merge_with_config_defaults`."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch

from yamltrace.capture import capture_outputs
from yamltrace.modeling import Config
from yamltrace.modeling import PreTrainedModel, merge_with_config_defaults
from yamltrace.modeling import BaseModelOutput, BaseModelOutputWithPast
from yamltrace.examples.tiny import TinyConfig

# ModelOutput


def test_model_output_keys_skip_none_and_keep_declaration_order() -> None:
    a, b = torch.zeros(1), torch.ones(1)
    out = BaseModelOutputWithPast(last_hidden_state=a, attentions=(b,))
    assert out.keys() == ["last_hidden_state", "attentions"]
    assert list(out) == out.keys() and len(out) == 2
    assert out.to_tuple() == (a, (b,))
    assert out[0] is a and out[-1] == (b,) and out[:1] == (a,)
    assert out["attentions"] == (b,)
    assert "hidden_states" not in out and out.get("hidden_states", "default") == "default"
    with pytest.raises(KeyError):
        out["hidden_states"]


def test_item_assignment_sets_declared_fields_and_appends_extra_keys() -> None:
    a = torch.zeros(1)
    out = BaseModelOutput(last_hidden_state=a)
    out["cross_attentions"] = ()
    out["hidden_states"] = (a,)
    out["cross_attentions"] = (a, a)
    assert out.keys() == ["last_hidden_state", "hidden_states", "cross_attentions"]
    assert out.hidden_states == (a,) and out.cross_attentions == (a, a)
    assert out.items() == [("last_hidden_state", a), ("hidden_states", (a,)), ("cross_attentions", (a, a))]


# Config


def test_config_json_round_trip(tmp_path) -> None:
    config = TinyConfig(num_hidden_layers=3, output_attentions=True, tie_last_hidden_states=False, extra=[1, 2])
    path = tmp_path / "config.json"
    config.save(path)
    loaded = TinyConfig.load(path)
    assert loaded == config
    assert loaded.num_hidden_layers == 3 and loaded.extra == [1, 2] and loaded.tie_last_hidden_states is False
    assert TinyConfig.from_json_string(config.to_json_string()) == config
    assert loaded != TinyConfig(num_hidden_layers=3)


def test_config_refuses_another_model_type() -> None:
    with pytest.raises(ValueError, match="TinyConfig reads model_type 'yamltrace-tiny', got 'yamltrace'"):
        TinyConfig.from_json_string(Config().to_json_string())


# merge_with_config_defaults


class Model(PreTrainedModel):
    """Records the arguments its forward received."""

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self.seen: dict[str, Any] = {}

    @merge_with_config_defaults
    def forward(self, x: Any = None, use_cache: bool | None = None, **kwargs: Any) -> dict[str, Any]:
        self.seen = {"use_cache": use_cache, "config_is_causal": getattr(self.config, "is_causal", "unset"), **kwargs}
        return self.seen


@pytest.mark.parametrize(
    ("args", "kwargs", "config_value", "expected"),
    [
        ((0,), {}, True, True),
        ((0, False), {}, True, False),
        ((0,), {"use_cache": False}, True, False),
        ((0, None), {}, False, False),
        ((0,), {"use_cache": None}, True, True),
        ((0,), {"use_cache": True}, False, True),
    ],
)
def test_explicit_value_wins_and_none_falls_back_to_config(args, kwargs, config_value, expected) -> None:
    model = Model(Config(use_cache=config_value))
    assert model(*args, **kwargs)["use_cache"] is expected


def test_use_cache_with_gradient_checkpointing_in_training_becomes_false_with_a_warning() -> None:
    model = Model(Config(use_cache=True)).train()
    model.gradient_checkpointing = True
    with pytest.warns(UserWarning, match="incompatible with gradient checkpointing"):
        assert model(0)["use_cache"] is False
    model.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert model(0)["use_cache"] is True


@pytest.mark.parametrize("config_has_it", [False, True])
def test_is_causal_is_set_for_the_call_then_restored(config_has_it) -> None:
    config = Config(is_causal=True) if config_has_it else Config()
    model = Model(config)
    seen = model(0, is_causal=False)
    assert seen["is_causal"] is False and seen["config_is_causal"] is False
    assert (config.is_causal if config_has_it else hasattr(config, "is_causal")) is config_has_it


def test_is_causal_is_restored_when_forward_raises() -> None:
    class Failing(Model):
        @merge_with_config_defaults
        def forward(self, x: Any = None, **kwargs: Any) -> None:
            raise RuntimeError("boom")

    config = Config(is_causal=True)
    with pytest.raises(RuntimeError, match="boom"):
        Failing(config)(0, is_causal=False)
    assert config.is_causal is True


def test_invalid_vision_feature_select_strategy_is_refused() -> None:
    with pytest.raises(ValueError, match="Unexpected vision_feature_select_strategy 'mean'"):
        Model(Config())(0, vision_feature_select_strategy="mean")


class CapturedModel(Model):
    """`Model` with `capture_outputs` under `merge_with_config_defaults`, as base models stack them."""

    @merge_with_config_defaults
    @capture_outputs
    def forward(self, x: Any = None, use_cache: bool | None = None, **kwargs: Any) -> dict[str, Any]:
        self.seen = {"use_cache": use_cache, **kwargs}
        return self.seen


@pytest.mark.parametrize(("args", "expected"), [((0, None), False), ((0, True), True), ((0,), False)])
def test_positions_are_read_through_the_capture_decorator(args, expected) -> None:
    model = CapturedModel(Config(use_cache=False))
    assert model(*args)["use_cache"] is expected
