"""Input files: every row checked when opened (located errors, before any shard), read back lazily."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers_extract import TEXTS, tiny_tokenizer

from yamltrace.extraction import ExtractError
from yamltrace.extraction._data import TokenizedBatches, load_tokenizer, open_texts


def jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows), encoding="utf-8")
    return path


def test_jsonl_rows_in_order_blank_lines_skipped(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "d.jsonl", [{"text": "héllo", "id": 1}, "", {"text": "two\nlines"}, "   ", {"text": ""}])
    texts = open_texts(path)
    assert len(texts) == 3 and list(texts) == ["héllo", "two\nlines", ""]


def test_txt_rows_are_non_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "d.txt"
    path.write_bytes(b"first line\r\n\nsecond\n  \nthird")
    assert list(open_texts(path)) == ["first line", "second", "third"]


def test_every_bad_row_is_listed_with_its_line(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "d.jsonl", [{"text": "ok"}, {"body": "x", "title": "y"}, "{not json", [1], {"text": 3}])
    with pytest.raises(ExtractError) as caught:
        open_texts(path, "text")
    assert str(caught.value).splitlines() == [
        f"{path}: 4 bad row(s):",
        "  line 2: no field 'text' (fields: body, title); choose one with --text-field",
        "  line 3: not JSON (Expecting property name enclosed in double quotes, column 2)",
        "  line 4: a JSON list, not an object with a 'text' field",
        "  line 5: field 'text' is int, not text",
    ]


def test_many_bad_rows_are_counted(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "d.jsonl", [{"body": str(i)} for i in range(25)])
    with pytest.raises(ExtractError, match=r"25 bad row\(s\):(\n  line \d+: .*){10}\n  \.\.\. and 15 more$"):
        open_texts(path)


@pytest.mark.parametrize("content", [b"", b"\n\n  \n"], ids=["empty", "blank"])
def test_an_empty_file_is_an_error(tmp_path: Path, content: bytes) -> None:
    for name in ("d.jsonl", "d.txt"):
        (tmp_path / name).write_bytes(content)
        with pytest.raises(ExtractError, match=f"{name}: the file holds no rows"):
            open_texts(tmp_path / name)


def test_not_utf8_and_unknown_formats(tmp_path: Path) -> None:
    (tmp_path / "d.txt").write_bytes(b"ok\n\xff\xfe\n")
    with pytest.raises(ExtractError, match=r"line 2: not UTF-8 \(invalid start byte at byte 0\)"):
        open_texts(tmp_path / "d.txt")
    (tmp_path / "d.csv").write_text("text\nhi\n")
    with pytest.raises(ExtractError, match="unknown data format '.csv'; use .jsonl, .txt or .parquet"):
        open_texts(tmp_path / "d.csv")
    with pytest.raises(ExtractError, match="no such file"):
        open_texts(tmp_path / "missing.jsonl")


def test_parquet_reads_one_column_or_says_to_install_pyarrow(tmp_path: Path) -> None:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        (tmp_path / "d.parquet").write_bytes(b"PAR1")
        with pytest.raises(ExtractError, match=r"reading .parquet needs pyarrow \(pip install pyarrow\)"):
            open_texts(tmp_path / "d.parquet")
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"text": ["a b", "c"], "n": [1, 2]}), tmp_path / "d.parquet")
        assert list(open_texts(tmp_path / "d.parquet")) == ["a b", "c"]
        with pytest.raises(ExtractError, match="no column 'body' \\(columns: text, n\\)"):
            open_texts(tmp_path / "d.parquet", "body")


def test_batches_are_padded_to_one_length(tmp_path: Path) -> None:
    tokenizer = load_tokenizer(tiny_tokenizer(tmp_path / "tok"))
    batches = TokenizedBatches(TEXTS, tokenizer, batch_size=3, max_length=5)
    assert len(batches) == 3
    shapes = [tuple(batches[i]["input_ids"].shape) for i in range(3)]
    assert shapes == [(3, 5), (3, 5), (1, 5)]
    first = batches[0]
    assert first["attention_mask"][2].tolist() == [1, 1, 1, 1, 1]  # "the bird sang a song": 5 words
    assert tokenizer.decode(first["input_ids"][0][:6].tolist()) == "the cat sat on the"
    with pytest.raises(IndexError):
        batches[3]


def test_a_tokenizer_folder_must_exist(tmp_path: Path) -> None:
    with pytest.raises(ExtractError, match="--tokenizer .*missing: not a directory"):
        load_tokenizer(tmp_path / "missing")


def test_deeply_nested_json_is_a_bad_row_with_its_line(tmp_path: Path) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    path = jsonl(tmp_path / "d.jsonl", [{"text": "ok"}, deep, '{"text": "x", "extra": ' + deep + "}"])
    with pytest.raises(ExtractError) as caught:
        open_texts(path)
    assert str(caught.value).splitlines()[1:] == [
        "  line 2: JSON nested too deeply to read",
        "  line 3: JSON nested too deeply to read",
    ]


def test_a_line_over_the_cap_is_a_bad_row_and_is_never_held_whole(tmp_path: Path) -> None:
    import tracemalloc

    path = tmp_path / "d.txt"
    with open(path, "wb") as f:
        f.write(b"first\n" + b"x" * (8 * 2**20) + b"\nlast\n" + b"y" * (2**20 + 1))
    tracemalloc.start()
    try:
        with pytest.raises(ExtractError) as caught:
            open_texts(path, max_row_bytes=2**20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(caught.value).splitlines()[1:] == [
        "  line 2: 8,388,609 bytes, over the 1,048,576-byte limit for one row; split it",
        "  line 4: 1,048,577 bytes, over the 1,048,576-byte limit for one row; split it",
    ]
    assert peak < 4 * 2**20, f"{peak:,} bytes retained while checking an 8 MiB line"
    path.write_bytes(b"first\n" + b"x" * 2**20 + b"\r\nlast")
    assert [len(t) for t in open_texts(path, max_row_bytes=2**20)] == [5, 2**20, 4]


class Recording:
    """A tokenizer that records the longest text it was given."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer, self.longest = tokenizer, 0

    def __call__(self, texts, **kwargs):
        self.longest = max([self.longest, *(len(t) for t in ([texts] if isinstance(texts, str) else texts))])
        return self.tokenizer(texts, **kwargs)


def test_a_long_text_is_cut_before_it_is_tokenised_to_the_same_tokens(tmp_path: Path) -> None:
    tokenizer = load_tokenizer(tiny_tokenizer(tmp_path / "tok"))
    texts = ["the cat sat on the mat " * 50_000, "a dog", "x" * 3_000 + " the cat"]  # the last: one long unknown word
    recording = Recording(tokenizer)
    got = TokenizedBatches(texts, recording, batch_size=3, max_length=8)[0]
    whole = tokenizer(texts, padding="max_length", truncation=True, max_length=8, return_tensors="pt")
    assert got["input_ids"].tolist() == whole["input_ids"].tolist()
    assert got["attention_mask"].tolist() == whole["attention_mask"].tolist()
    assert recording.longest == len(texts[2]), "the long word is read whole; the 1.1 MB text is cut to 192 characters"
