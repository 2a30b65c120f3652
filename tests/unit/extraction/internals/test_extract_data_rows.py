"""The input reader and the tokenised batches of `yamltrace extract`, read back row by row: the texts
of a `.jsonl` or `.txt` file in order, a line over the cap never held whole (memory measured on the
reader alone), batches padded to one length, and a long text cut before it is tokenised to the same
tokens."""

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
