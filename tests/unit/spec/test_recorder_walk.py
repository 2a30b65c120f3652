"""Every recorder check walks the root `outputs` and every scope alike: a recorder refused at the root
is refused inside a scope with the same message (its path adjusted), by `validate_spec` and `load_spec`."""

from __future__ import annotations

from helpers_spec import LAYER

from yamltrace import load_spec


def test_the_same_recorder_under_two_keys_or_in_two_scopes_is_accepted() -> None:
    spec = load_spec({"yamltrace": 1, "outputs": {"a": LAYER, "b": LAYER}, "scopes": {"layers": {"outputs": {"a": LAYER}}}})
    assert len(spec.outputs["a"]) == len(spec.outputs["b"]) == len(spec.scopes["layers"].outputs["a"]) == 1
