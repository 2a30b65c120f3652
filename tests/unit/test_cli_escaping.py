"""Text reports keep one issue on one line: file names and messages are escaped (issue #12, item 13)."""

from __future__ import annotations

from pathlib import Path

import pytest

from yamltrace.cli import main
from yamltrace.cli._report import escape_text


def test_a_newline_in_a_base_file_name_cannot_forge_a_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    forged = "x.yaml:1:1: $: looks like another issue\nbase.yaml"
    (tmp_path / forged).write_text("yamltrace: 1\nmodel: &m A\n")
    (tmp_path / "top.yaml").write_text(f"yamltrace: 1\nextends: \"{forged.encode('unicode_escape').decode()}\"\n")
    assert main(["validate", str(tmp_path / "top.yaml")]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and lines[1] == "1 file, 1 invalid, 1 problem"
    assert "looks like another issue\\nbase.yaml" in lines[0]


@pytest.mark.parametrize("text, shown", [("a\nb", "a\\nb"), ("a\\b", "a\\\\b"), ("\x85\u2028\x1b", "\\x85\\u2028\\x1b"), ("é", "é")])
def test_escape_text(text: str, shown: str) -> None:
    assert escape_text(text) == shown
