"""The recorder caps (per key and over the whole spec), at the private limits, and a refused recorder
refused alike at the root and inside a scope, by `validate_spec` and `load_spec`."""

from __future__ import annotations

from typing import Any

import pytest
from helpers_spec import LAYER

from yamltrace import SpecError, load_spec, validate_spec
from yamltrace.errors import format_json_path
from yamltrace.spec._limits import MAX_RECORDERS, MAX_RECORDERS_PER_KEY


# (output key, its recorders as written, the path of the refusal below `outputs`, a word of the message)
REFUSED: dict[str, tuple[str, Any, tuple[str | int, ...], str]] = {
    "main target": ("hidden_states", {"target": "__main__:X"}, ("hidden_states", "target"), "__main__"),
    "main bare reference": ("hidden_states", "__main__:X", ("hidden_states",), "__main__"),
    "main in a target list": ("hidden_states", {"target": [LAYER, "__main__:X"]}, ("hidden_states", "target", 1), "__main__"),
    "index": ("hidden_states", {"target": LAYER, "index": 1_000_000_000}, ("hidden_states", "index"), "out of range"),
    "layers": ("hidden_states", {"target": LAYER, "layers": [0, 10**9]}, ("hidden_states", "layers", 1), "out of range"),
    "config key": (
        "hidden_states",
        {"target": LAYER, "num_hidden_layers_key": "to_dict"},
        ("hidden_states", "num_hidden_layers_key"),
        "config attribute",
    ),
    "layer name of dots": (
        "hidden_states",
        {"target": LAYER, "layer_name": ".."},
        ("hidden_states", "layer_name"),
        "no path component",
    ),
    "input": ("hidden_states", {"target": LAYER, "input": 10**9}, ("hidden_states", "input"), "out of range"),
    "seq_dim": ("hidden_states", {"target": LAYER, "seq_dim": 10**9}, ("hidden_states", "seq_dim"), "no tensor dimension"),
    "slice with a line break": (
        "hidden_states",
        {"target": LAYER, "positions": "-8:\n"},
        ("hidden_states", "positions"),
        "not a slice",
    ),
    "slice of 990 digits": (
        "hidden_states",
        {"target": LAYER, "positions": "::" + "9" * 990},
        ("hidden_states", "positions"),
        "must lie in",
    ),
    "slice step 0": ("hidden_states", {"target": LAYER, "positions": "::0"}, ("hidden_states", "positions"), "positive"),
    "position": ("hidden_states", {"target": LAYER, "positions": [0, 10**17]}, ("hidden_states", "positions", 1), "out of range"),
    "repeated positions": (
        "hidden_states",
        {"target": LAYER, "positions": [0, 0]},
        ("hidden_states", "positions"),
        "listed twice",
    ),
    "device with a line break": ("hidden_states", {"target": LAYER, "to": "cpu\n"}, ("hidden_states", "to"), "not a device"),
    "input with a line break": ("hidden_states", {"target": LAYER, "input": "x\n"}, ("hidden_states", "input"), "argument name"),
    "repeated recorder": ("hidden_states", [LAYER, {"target": LAYER, "index": 0}], ("hidden_states", 1), "repeats recorder 0"),
    "too many recorders": (
        "h",
        [{"target": LAYER, "index": i} for i in range(MAX_RECORDERS_PER_KEY + 1)],
        ("h", MAX_RECORDERS_PER_KEY),
        "MAX_RECORDERS_PER_KEY",
    ),
    **{f"reserved {key}": (key, LAYER, (key,), "is reserved") for key in ("logits", "past_key_values", "cache", "cache_params")},
}


def _refusals(error: SpecError) -> dict[str, str]:
    return {issue.json_path: issue.message for issue in error.issues}


def _document(key: str, recorders: Any, scope: str | None) -> dict[str, Any]:
    outputs = {key: recorders}
    return {"yamltrace": 1, "outputs": outputs} if scope is None else {"yamltrace": 1, "scopes": {scope: {"outputs": outputs}}}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_refused_recorder_is_refused_alike_at_the_root_and_in_a_scope(case: str) -> None:
    key, recorders, below, word = REFUSED[case]
    messages = []
    for scope, prefix in ((None, ("outputs",)), ("layers", ("scopes", "layers", "outputs"))):
        where = format_json_path((*prefix, *below))
        for check in (validate_spec, lambda d: load_spec(d, trust_imports=True)):
            with pytest.raises(SpecError) as raised:
                check(_document(key, recorders, scope))
            refusals = _refusals(raised.value)
            assert where in refusals, f"{case}: nothing refused at {where}: {refusals}"
            messages.append(refusals[where])
    assert word in messages[0] and len(set(messages)) == 1, messages


def test_recorders_are_capped_over_the_whole_spec() -> None:
    per_scope = MAX_RECORDERS // 4 + 1  # four scopes: one recorder over the cap in all
    recorders = [{"target": LAYER, "index": i} for i in range(per_scope)]
    outputs = {f"k{i}": recorders[i * 8 : (i + 1) * 8] for i in range((per_scope + 7) // 8)}
    scopes = {f"s{i}": {"outputs": outputs} for i in range(4)}
    with pytest.raises(SpecError, match="MAX_RECORDERS") as raised:
        validate_spec({"yamltrace": 1, "scopes": scopes})
    (issue,) = [i for i in raised.value.issues if "MAX_RECORDERS)" in i.message]
    assert issue.json_path.startswith("$.scopes.s3.outputs")
