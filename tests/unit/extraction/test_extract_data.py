"""Input files of `yamltrace extract`: every row checked when the file is opened, each bad row reported
with its line, an unreadable file or format or a missing tokenizer folder one error, all before any
shard is written."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers import ROOT
from helpers_extract import tiny_tokenizer

from yamltrace.cli import main
from yamltrace.examples.tiny import TinyConfig

PREFIX = "yamltrace extract: error: "


def jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows), encoding="utf-8")
    return path


@pytest.fixture
def refused(tmp_path: Path, capsys):
    """Run the command on a data file (and a tokenizer folder); that it fails before any shard; what it printed."""
    config = tmp_path / "config.json"
    TinyConfig().save(config)
    tokenizer = tiny_tokenizer(tmp_path / "tok")
    out = tmp_path / "out"

    def run(data: Path, *extra: str, tokenizer: Path = tokenizer) -> str:
        argv = [
            "extract", "--model", "yamltrace.examples.tiny:TinyModel", "--config", str(config),
            "--spec", str(ROOT / "specs" / "tiny.yaml"), "--data", str(data), "--tokenizer", str(tokenizer),
            "--max-length", "6", "--out", str(out), "--quiet", *extra,
        ]  # fmt: skip
        capsys.readouterr()
        assert main(argv) == 1
        assert not out.exists()
        err = capsys.readouterr().err
        assert err.startswith(PREFIX), err
        return err

    return run


def test_every_bad_row_is_listed_with_its_line(tmp_path: Path, refused) -> None:
    path = jsonl(tmp_path / "d.jsonl", [{"text": "ok"}, {"body": "x", "title": "y"}, "{not json", [1], {"text": 3}])
    assert refused(path, "--text-field", "text").splitlines() == [
        f"{PREFIX}{path}: 4 bad row(s):",
        "  line 2: no field 'text' (fields: body, title); choose one with --text-field",
        "  line 3: not JSON (Expecting property name enclosed in double quotes, column 2)",
        "  line 4: a JSON list, not an object with a 'text' field",
        "  line 5: field 'text' is int, not text",
    ]


def test_many_bad_rows_are_counted(tmp_path: Path, refused) -> None:
    path = jsonl(tmp_path / "d.jsonl", [{"body": str(i)} for i in range(25)])
    assert re.search(r"25 bad row\(s\):(\n  line \d+: .*){10}\n  \.\.\. and 15 more$", refused(path))


@pytest.mark.parametrize("content", [b"", b"\n\n  \n"], ids=["empty", "blank"])
def test_an_empty_file_is_an_error(tmp_path: Path, refused, content: bytes) -> None:
    for name in ("d.jsonl", "d.txt"):
        (tmp_path / name).write_bytes(content)
        assert re.search(f"{name}: the file holds no rows", refused(tmp_path / name))


def test_not_utf8_and_unknown_formats(tmp_path: Path, refused) -> None:
    (tmp_path / "d.txt").write_bytes(b"ok\n\xff\xfe\n")
    assert re.search(r"line 2: not UTF-8 \(invalid start byte at byte 0\)", refused(tmp_path / "d.txt"))
    (tmp_path / "d.csv").write_text("text\nhi\n")
    assert re.search("unknown data format '.csv'; use .jsonl, .txt or .parquet", refused(tmp_path / "d.csv"))
    assert re.search("no such file", refused(tmp_path / "missing.jsonl"))


def test_parquet_reads_one_column_or_says_to_install_pyarrow(tmp_path: Path, refused, capsys) -> None:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        (tmp_path / "d.parquet").write_bytes(b"PAR1")
        assert re.search(r"reading .parquet needs pyarrow \(pip install pyarrow\)", refused(tmp_path / "d.parquet"))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        from yamltrace.extraction import open_activations

        pq.write_table(pa.table({"text": ["a b", "c"], "n": [1, 2]}), tmp_path / "d.parquet")
        assert re.search("no column 'body' \\(columns: text, n\\)", refused(tmp_path / "d.parquet", "--text-field", "body"))
        argv = [
            "extract", "--model", "yamltrace.examples.tiny:TinyModel", "--config", str(tmp_path / "config.json"),
            "--spec", str(ROOT / "specs" / "tiny.yaml"), "--data", str(tmp_path / "d.parquet"), "--tokenizer",
            str(tmp_path / "tok"), "--max-length", "6", "--out", str(tmp_path / "out"), "--quiet", "--columns", "text",
        ]  # fmt: skip
        assert main(argv) == 0, capsys.readouterr().err
        assert open_activations(tmp_path / "out").column("text") == ["a b", "c"]


def test_a_tokenizer_folder_must_exist(tmp_path: Path, refused) -> None:
    data = jsonl(tmp_path / "d.jsonl", [{"text": "ok"}])
    assert re.search("--tokenizer .*missing: not a directory", refused(data, tokenizer=tmp_path / "missing"))


def test_deeply_nested_json_is_a_bad_row_with_its_line(tmp_path: Path, refused) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    path = jsonl(tmp_path / "d.jsonl", [{"text": "ok"}, deep, '{"text": "x", "extra": ' + deep + "}"])
    assert refused(path).splitlines()[1:] == [
        "  line 2: JSON nested too deeply to read",
        "  line 3: JSON nested too deeply to read",
    ]
