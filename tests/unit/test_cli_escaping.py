"""Text reports keep one issue on one line: file names and messages are escaped (issue #12, item 13)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from yamltrace.cli import main


def test_a_newline_in_a_base_file_name_cannot_forge_a_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    forged = "x.yaml:1:1: $: looks like another issue\nbase.yaml"
    (tmp_path / forged).write_text("yamltrace: 1\nmodel: &m A\n")
    (tmp_path / "top.yaml").write_text(f'yamltrace: 1\nextends: "{forged.encode("unicode_escape").decode()}"\n')
    assert main(["validate", str(tmp_path / "top.yaml")]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and lines[1] == "1 file, 1 invalid, 1 problem"
    assert "looks like another issue\\nbase.yaml" in lines[0]


def test_github_annotations_escape_control_characters_in_file_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    name = "bad\x1b[31mred\x07.yaml"
    (tmp_path / name).write_text("yamltrace: 2\n")
    assert main(["validate", "--format", "github", str(tmp_path / name)]) == 1
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    (line,) = out.splitlines()
    assert line.startswith("::error file=") and "bad\\x1b[31mred\\x07.yaml" in line


def extract_argv(tmp_path: Path, data: Path, out: Path) -> list[str]:
    from helpers import ROOT
    from helpers_extract import tiny_tokenizer

    from yamltrace.examples.tiny import TinyConfig

    TinyConfig().save(tmp_path / "config.json")
    return [
        "extract", "--model", "yamltrace.examples.tiny:TinyModel", "--config", str(tmp_path / "config.json"),
        "--spec", str(ROOT / "specs" / "tiny.yaml"), "--data", str(data), "--tokenizer", str(tiny_tokenizer(tmp_path / "tok")),
        "--max-length", "6", "--out", str(out),
    ]  # fmt: skip


def test_extract_escapes_field_names_and_file_names_in_its_bad_row_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data\x1b]0;title\x07.jsonl"
    forged = {"\n::error file=README.md,line=1::forged": 1, "\x1b[2J": 2, "text\u2028": 3}
    data.write_text(json.dumps(forged) + "\n", encoding="utf-8")
    assert main(extract_argv(tmp_path, data, tmp_path / "out")) == 1
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err and "\u2028" not in err
    assert err.splitlines() == [
        f"yamltrace extract: error: {tmp_path}/data\\x1b]0;title\\x07.jsonl: 1 bad row(s):",
        "  line 1: no field 'text' (fields: \\n::error file=README.md,line=1::forged, \\x1b[2J, text\\u2028); choose one with --text-field",
    ]


def test_extract_escapes_the_output_folder_it_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data.txt"
    data.write_text("the cat sat\n")
    out = tmp_path / "out\nwrote 0 rows\x1b[1m"
    assert main(extract_argv(tmp_path, data, out)) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [
        f"wrote 1 rows of hidden_states, attentions, input_ids, attention_mask in 1 shard(s) to {tmp_path}/out\\nwrote 0 rows\\x1b[1m"
    ]
    assert "\x1b" not in captured.err
