"""A tab in a spec is named in words in the text report, which escapes backslashes (PyYAML's repr
`'\\t'` would print doubled)."""

from __future__ import annotations

import pytest

from yamltrace import SpecError, load_spec
from yamltrace.cli._report import escaped_issue


def test_a_tab_is_named_in_words_in_the_text_report() -> None:
    with pytest.raises(SpecError) as raised:
        load_spec("yamltrace: 1\noutputs:\n\thidden_states: X\n")
    line = escaped_issue(raised.value.issues[0])
    assert line.startswith("<string>:3:1: $: a tab character cannot start a token (YAML indents with spaces); replace the tab")
    assert "\\" not in line
