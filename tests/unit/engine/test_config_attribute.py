"""`config_attribute` reads what `getattr` reads, on transformers' configs (renamed, present and missing
names, an instance-level `attribute_map`) and on classes whose lookup it leaves to `getattr`."""

from __future__ import annotations

from typing import Any

import pytest

from yamltrace.engine import config_attribute, plain_config_lookup

NAMES = ("return_dict", "num_hidden_layers", "hidden_size", "output_attentions", "tie_last_hidden_states", "nope")


def test_transformers_configs_read_as_getattr_reads() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=4)
    config.return_dict = False
    gpt2 = transformers.GPT2Config(n_layer=3)  # attribute_map: num_hidden_layers -> n_layer
    gpt2.attribute_map = {**gpt2.attribute_map, "nope": "n_embd"}  # an instance-level map is followed too
    for cfg in (config, gpt2):
        assert plain_config_lookup(type(cfg)) is True
        for name in NAMES:
            assert config_attribute(cfg, name, "default") == getattr(cfg, name, "default"), name
    assert config_attribute(gpt2, "num_hidden_layers", None) == 3 and config_attribute(gpt2, "nope", None) == gpt2.n_embd


class Plain:
    """Object's lookup."""

    def __init__(self) -> None:
        self.return_dict = False


class Forwarding(Plain):
    """A `__getattr__` that answers every name: left to getattr."""

    def __getattr__(self, name: str) -> Any:
        return f"forwarded {name}"


def test_other_lookups_are_left_to_getattr() -> None:
    assert plain_config_lookup(Plain) is False and plain_config_lookup(Forwarding) is None
    for cfg in (Plain(), Forwarding(), None):
        for name in NAMES:
            assert config_attribute(cfg, name, "default") == getattr(cfg, name, "default"), name


class WithClassLevel(Plain):
    """Names a class defines: a default, a property that wins over the instance's `__dict__`."""

    output_attentions = True

    @property
    def hidden_size(self) -> int:
        return 7


class Slotted:
    __slots__ = ("return_dict",)

    def __init__(self) -> None:
        self.return_dict = False


def test_names_defined_by_the_class_read_as_getattr_reads() -> None:
    cfg = WithClassLevel()
    cfg.__dict__["hidden_size"] = 3  # shadowed by the property, as in `getattr`
    cfg.tie_last_hidden_states = False
    slotted = Slotted()
    for config in (cfg, slotted):
        assert plain_config_lookup(type(config)) is False
        for name in NAMES:
            assert config_attribute(config, name, "default") == getattr(config, name, "default"), name
    WithClassLevel.nope = "set on the class later"  # a class attribute added after the first reads
    try:
        assert config_attribute(cfg, "nope", "default") == "set on the class later"
    finally:
        del WithClassLevel.nope
    assert config_attribute(cfg, "nope", "default") == "default"
