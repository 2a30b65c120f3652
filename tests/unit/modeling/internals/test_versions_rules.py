"""The modeling rules that follow the transformers release: each on both sides of the release that changed it.

The release is chosen by replacing `yamltrace._versions.transformers_version`; output classes are
defined inside the tests, after that, as the installed release would define them at import.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Any

import pytest
import torch

from yamltrace import _versions
from yamltrace.errors import YamltraceError
from yamltrace.modeling import BaseModelOutput, BaseModelOutputWithPast, CacheNameError, Config, ModelOutput
from yamltrace.modeling import PreTrainedModel, merge_with_config_defaults
from yamltrace.modeling._outputs import _cache_field

BEFORE, AFTER, KEPT = (5, 23, 0), (5, 24, 0), (5, 25, 0)
DEPRECATED = r"`past_key_values`/`cache_params` are deprecated\. Use `cache` instead\."


def follow(monkeypatch: pytest.MonkeyPatch, version: tuple[int, int, int]) -> None:
    monkeypatch.setattr(_versions, "transformers_version", lambda: version)


def with_past() -> type[ModelOutput]:
    """An output with a cache, declared as yamltrace's own (`cache`, renamed before 5.24.0)."""

    @dataclass
    @_cache_field
    class WithPast(ModelOutput):
        last_hidden_state: Any = None
        cache: Any = None
        hidden_states: Any = None

    return WithPast


@dataclass
class WithoutCache(ModelOutput):
    last_hidden_state: Any = None


class Cache:
    """A stand-in for a `DynamicCache`."""


@contextlib.contextmanager
def no_warning() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def test_the_shipped_output_names_the_field_as_the_installed_release() -> None:
    names = [f.name for f in fields(BaseModelOutputWithPast)]
    assert names == [
        "last_hidden_state",
        "cache" if _versions.cache_named_cache() else "past_key_values",
        "hidden_states",
        "attentions",
    ]


# from 5.24.0: `cache`, with `past_key_values` / `cache_params` as deprecated aliases


@pytest.mark.parametrize("alias", ["past_key_values", "cache_params"])
def test_from_5_24_an_alias_keyword_builds_the_cache_field_with_a_warning(monkeypatch, alias) -> None:
    follow(monkeypatch, AFTER)
    cache = Cache()
    with pytest.warns(FutureWarning, match=DEPRECATED):
        out = with_past()(last_hidden_state=1, **{alias: cache})
    assert out.cache is cache and out.keys() == ["last_hidden_state", "cache"] and out.to_tuple() == (1, cache)


@pytest.mark.parametrize("alias", ["past_key_values", "cache_params"])
def test_from_5_24_the_cache_under_two_names_is_refused(monkeypatch, alias) -> None:
    follow(monkeypatch, AFTER)
    with pytest.raises(CacheNameError, match=f"both `cache` and `{alias}`.*pass `cache` only") as caught:
        with_past()(cache=Cache(), **{alias: Cache()})
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, YamltraceError)


def test_from_5_24_a_second_alias_stays_an_unknown_keyword(monkeypatch) -> None:
    follow(monkeypatch, AFTER)
    with pytest.warns(FutureWarning), pytest.raises(TypeError, match="cache_params"):
        with_past()(past_key_values=Cache(), cache_params=Cache())


@pytest.mark.parametrize("alias", ["past_key_values", "cache_params"])
def test_from_5_24_every_read_through_an_alias_reads_cache_with_a_warning(monkeypatch, alias) -> None:
    follow(monkeypatch, AFTER)
    cache = Cache()
    out = with_past()(last_hidden_state=1, cache=cache)
    reads = [lambda: out[alias], lambda: getattr(out, alias), lambda: alias in out, lambda: out.get(alias, "default")]
    for read in reads:
        with pytest.warns(FutureWarning, match=DEPRECATED):
            assert read() in (cache, True)
    with no_warning():
        assert out["cache"] is cache and out.cache is cache and "cache" in out and out.get("cache") is cache


@pytest.mark.parametrize("how", ["item", "attribute"])
def test_from_5_24_writing_through_an_alias_writes_cache(monkeypatch, how) -> None:
    follow(monkeypatch, AFTER)
    cache, out = Cache(), with_past()(last_hidden_state=1)
    with pytest.warns(FutureWarning, match=DEPRECATED):
        if how == "item":
            out["past_key_values"] = cache
        else:
            out.past_key_values = cache
    assert out.cache is cache and out.keys() == ["last_hidden_state", "cache"]


def test_from_5_24_an_output_without_a_cache_has_no_alias_either(monkeypatch) -> None:
    follow(monkeypatch, AFTER)
    out = WithoutCache(last_hidden_state=1)
    with pytest.warns(FutureWarning), pytest.raises(AttributeError, match="cache"):
        _ = out.past_key_values
    with pytest.warns(FutureWarning):
        assert "past_key_values" not in out
    with pytest.warns(FutureWarning), pytest.raises(KeyError, match="cache"):
        out["cache_params"]


# before 5.24.0: `past_key_values` is the field, the other names are unknown


def test_before_5_24_the_field_is_past_key_values_without_a_warning(monkeypatch) -> None:
    follow(monkeypatch, BEFORE)
    cache = Cache()
    with no_warning():
        out = with_past()(last_hidden_state=1, past_key_values=cache)
        assert out.keys() == ["last_hidden_state", "past_key_values"]
        assert out["past_key_values"] is cache and out.past_key_values is cache and "past_key_values" in out
        assert out.get("past_key_values") is cache


@pytest.mark.parametrize("name", ["cache", "cache_params"])
def test_before_5_24_cache_and_cache_params_are_unknown_names(monkeypatch, name) -> None:
    follow(monkeypatch, BEFORE)
    cls = with_past()
    with pytest.raises(TypeError, match=name):
        cls(**{name: Cache()})
    out = cls(last_hidden_state=1, past_key_values=Cache())
    with pytest.raises(KeyError):
        out[name]
    with pytest.raises(AttributeError):
        getattr(out, name)
    assert name not in out and out.get(name, "default") == "default"


def test_before_5_24_an_output_without_the_field_takes_past_key_values_as_a_plain_attribute(monkeypatch) -> None:
    follow(monkeypatch, BEFORE)
    out = WithoutCache(last_hidden_state=1)
    with pytest.raises(AttributeError, match="'WithoutCache' object has no attribute 'past_key_values'"):
        _ = out.past_key_values
    cache = Cache()
    out.past_key_values = cache
    assert out.past_key_values is cache and out.keys() == ["last_hidden_state"]


def test_item_assignment_of_an_undeclared_key_still_appends_it(monkeypatch) -> None:
    for version in (BEFORE, AFTER):
        follow(monkeypatch, version)
        out = BaseModelOutput(last_hidden_state=1)
        out["cross_attentions"] = (2,)
        assert out.keys() == ["last_hidden_state", "cross_attentions"]


# 5.25.0: a class that still declares `past_key_values` as a field keeps it


@dataclass
class DeclaresPastKeyValues(ModelOutput):
    last_hidden_state: Any = None
    past_key_values: Any = None


def test_from_5_25_a_declared_alias_is_a_field_of_its_own(monkeypatch) -> None:
    follow(monkeypatch, KEPT)
    cache, other = Cache(), Cache()
    with no_warning():
        out = DeclaresPastKeyValues(last_hidden_state=1, past_key_values=cache)
        assert out.keys() == ["last_hidden_state", "past_key_values"] and out.to_tuple() == (1, cache)
        assert out["past_key_values"] is cache and out.past_key_values is cache and out.get("past_key_values") is cache
        assert "past_key_values" in out
        out["past_key_values"] = other
        assert out.keys() == ["last_hidden_state", "past_key_values"] and out.past_key_values is other


def test_from_5_25_a_class_declaring_an_alias_renames_no_keyword(monkeypatch) -> None:
    follow(monkeypatch, KEPT)
    with pytest.raises(TypeError, match="unexpected keyword argument 'cache_params'"):
        DeclaresPastKeyValues(last_hidden_state=1, cache_params=Cache())
    with pytest.warns(FutureWarning, match=DEPRECATED), pytest.raises(KeyError, match="cache"):
        _ = DeclaresPastKeyValues(last_hidden_state=1)["cache_params"]  # an undeclared alias still means `cache`


def test_in_5_24_a_declared_alias_is_still_renamed(monkeypatch) -> None:
    follow(monkeypatch, AFTER)
    with pytest.warns(FutureWarning, match=DEPRECATED), pytest.raises(TypeError, match="unexpected keyword argument 'cache'"):
        DeclaresPastKeyValues(last_hidden_state=1, past_key_values=Cache())
    out = DeclaresPastKeyValues(last_hidden_state=1)
    with pytest.warns(FutureWarning, match=DEPRECATED):
        out["past_key_values"] = Cache()
    assert out.keys() == ["last_hidden_state", "cache"]


# merge_with_config_defaults: use_cache under gradient checkpointing


class Model(PreTrainedModel):
    @merge_with_config_defaults
    def forward(self, x: Any = None, use_cache: bool | None = None) -> bool | None:
        return use_cache


@pytest.mark.parametrize("grad", [True, False], ids=["grad", "no_grad"])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("version", [BEFORE, AFTER], ids=["5.23", "5.24"])
def test_checkpointing_forces_use_cache_off_as_the_release_does(monkeypatch, version, training, grad) -> None:
    follow(monkeypatch, version)
    model = Model(Config(use_cache=True)).train(training)
    model.gradient_checkpointing = True
    forced = training and (grad or version < (5, 24, 0))
    with torch.set_grad_enabled(grad), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert model(0) is (not forced)
        assert model(0, use_cache=True) is (not forced)
    assert bool(caught) is forced
    assert all("incompatible with gradient checkpointing" in str(w.message) for w in caught)


@pytest.mark.parametrize("version", [BEFORE, AFTER], ids=["5.23", "5.24"])
def test_without_checkpointing_use_cache_is_kept_in_every_release(monkeypatch, version) -> None:
    follow(monkeypatch, version)
    model = Model(Config(use_cache=True)).train()
    with torch.no_grad():
        assert model(0) is True
    assert model(0) is True
