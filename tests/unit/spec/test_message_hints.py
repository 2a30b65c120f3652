"""The fix a message suggests is one that works: a comma list written as text becomes a YAML list,
0 / 1 for a flag becomes true / false, a quoted number loses its quotes, and a tab is named in words
(the text report escapes backslashes, so PyYAML's repr `'\\t'` would print doubled)."""

from __future__ import annotations

import pytest

from yamltrace import SpecError, load_spec, validate_spec


def _messages(text: str) -> list[str]:
    with pytest.raises(SpecError) as raised:
        validate_spec(text)
    return [f"{issue.json_path}: {issue.message}" for issue in raised.value.issues]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('layers: "0,-1"', "$.outputs.a.layers: '0,-1' is not of type 'array'; write [0, -1] for a list"),
        ("layers: 3", "$.outputs.a.layers: 3 is not of type 'array'; write [3] for a list of one"),
        ("detach: 1", "$.outputs.a.detach: 1 is not of type 'boolean'; write true or false"),
        ("detach: 0", "$.outputs.a.detach: 0 is not of type 'boolean'; write true or false"),
        ('index: "0"', "$.outputs.a.index: '0' is not of type 'integer'; it is quoted, so it is text: remove the quotes"),
    ],
)
def test_the_suggested_fix_is_valid_yaml(value: str, message: str) -> None:
    assert _messages(f"yamltrace: 1\noutputs:\n  a: {{target: X, {value}}}\n") == [message]


def test_the_suggested_list_validates() -> None:
    validate_spec("yamltrace: 1\noutputs:\n  a: {target: X, layers: [0, -1]}\n")


def test_after_an_anchor_the_rest_of_the_file_is_still_checked() -> None:
    text = "yamltrace: 1\noutputs:\n  a: &x X\n  b: {target: X, idx: 0}\n  c: *x\n"
    assert _messages(text) == [
        "$: anchors (&x) are not allowed in a spec; write the value out",
        "$.outputs.b.idx: unknown key 'idx'; did you mean 'index'?",
    ]
    with pytest.raises(SpecError, match="(?s)anchors.*unknown key 'idx'"):
        load_spec(text)


def test_after_a_tab_the_rest_of_the_file_is_still_checked() -> None:
    assert _messages("yamltrace: 1\noutputs:\n\thidden_states: {target: X, detach: 1}\n") == [
        "$: a tab character cannot start a token (YAML indents with spaces); replace the tab with spaces "
        "(while scanning for the next token)",
        "$.outputs.hidden_states.detach: 1 is not of type 'boolean'; write true or false",
    ]
