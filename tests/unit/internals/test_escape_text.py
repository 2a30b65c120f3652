"""`escape_text`, the text reports' escaping of file names and messages, case by case (the
command-line cases are in tests/unit/test_cli_escaping.py)."""

from __future__ import annotations


import pytest

from yamltrace.cli._report import escape_text


@pytest.mark.parametrize(
    "text, shown", [("a\nb", "a\\nb"), ("a\\b", "a\\\\b"), ("\x85\u2028\x1b", "\\x85\\u2028\\x1b"), ("é", "é")]
)
def test_escape_text(text: str, shown: str) -> None:
    assert escape_text(text) == shown
